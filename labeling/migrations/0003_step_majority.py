"""StepMajority: each step's human majority label, kept by triggers on the step labels.

One statement-level function serves the three triggers (insert, update, delete): it
finds the steps whose human votes the statement may have changed (for an update, only
rows whose step, annotator, value or status changed, on either side), makes sure each
has a row and locks those rows in step order (so concurrent writers cannot deadlock, and
each recount runs after the previous writer of that step committed), recounts them, and
drops the rows of steps with no vote left. Existing labels are counted once at the end.
"""

import django.db.models.deletion
from django.db import migrations, models

# A human vote: a submitted label whose annotator is not an import source.
HUMAN_VOTE = "l.status = 'submitted' AND u.username NOT LIKE 'import:%'"
# mode() takes the first of the most frequent values in its ORDER BY, so ascending and
# descending agree exactly when one value leads alone; a tie gives NULL.
MAJORITY = (
    "CASE WHEN mode() WITHIN GROUP (ORDER BY l.value)"
    " = mode() WITHIN GROUP (ORDER BY l.value DESC)"
    " THEN mode() WITHIN GROUP (ORDER BY l.value) END"
)
COUNT_FROM = (
    "FROM labeling_steplabel l JOIN auth_user u ON u.id = l.annotator_id"
    " JOIN trajectories_step s ON s.id = l.step_id"
    " JOIN trajectories_trajectory t ON t.id = s.trajectory_id"
)

REFRESH = f"""
CREATE FUNCTION labeling_stepmajority_refresh() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    changed bigint[];
BEGIN
    IF TG_OP = 'INSERT' THEN
        SELECT array_agg(DISTINCT l.step_id) INTO changed
        FROM new_labels l JOIN auth_user u ON u.id = l.annotator_id WHERE {HUMAN_VOTE};
    ELSIF TG_OP = 'DELETE' THEN
        SELECT array_agg(DISTINCT l.step_id) INTO changed
        FROM old_labels l JOIN auth_user u ON u.id = l.annotator_id WHERE {HUMAN_VOTE};
    ELSE
        SELECT array_agg(DISTINCT l.step_id) INTO changed FROM (
            SELECT side.* FROM new_labels n JOIN old_labels o ON o.id = n.id
            CROSS JOIN LATERAL (VALUES (n.step_id, n.annotator_id, n.status),
                                       (o.step_id, o.annotator_id, o.status))
                AS side(step_id, annotator_id, status)
            WHERE (n.step_id, n.annotator_id, n.value, n.status)
                  IS DISTINCT FROM (o.step_id, o.annotator_id, o.value, o.status)
        ) l JOIN auth_user u ON u.id = l.annotator_id WHERE {HUMAN_VOTE};
    END IF;
    IF changed IS NULL THEN
        RETURN NULL;
    END IF;
    INSERT INTO labeling_stepmajority (step_id, project_id, value)
    SELECT s.id, t.project_id, NULL FROM trajectories_step s
    JOIN trajectories_trajectory t ON t.id = s.trajectory_id
    WHERE s.id = ANY(changed) ORDER BY s.id
    ON CONFLICT (step_id) DO NOTHING;
    PERFORM 1 FROM labeling_stepmajority WHERE step_id = ANY(changed)
    ORDER BY step_id FOR UPDATE;
    INSERT INTO labeling_stepmajority AS m (step_id, project_id, value)
    SELECT l.step_id, min(t.project_id), {MAJORITY}
    {COUNT_FROM} WHERE l.step_id = ANY(changed) AND {HUMAN_VOTE}
    GROUP BY l.step_id
    ON CONFLICT (step_id) DO UPDATE SET value = EXCLUDED.value
    WHERE m.value IS DISTINCT FROM EXCLUDED.value;
    DELETE FROM labeling_stepmajority m WHERE m.step_id = ANY(changed)
    AND NOT EXISTS (
        SELECT 1 FROM labeling_steplabel l JOIN auth_user u ON u.id = l.annotator_id
        WHERE l.step_id = m.step_id AND {HUMAN_VOTE}
    );
    RETURN NULL;
END
$$;

CREATE TRIGGER steplabel_majority_insert AFTER INSERT ON labeling_steplabel
REFERENCING NEW TABLE AS new_labels
FOR EACH STATEMENT EXECUTE FUNCTION labeling_stepmajority_refresh();
CREATE TRIGGER steplabel_majority_update AFTER UPDATE ON labeling_steplabel
REFERENCING OLD TABLE AS old_labels NEW TABLE AS new_labels
FOR EACH STATEMENT EXECUTE FUNCTION labeling_stepmajority_refresh();
CREATE TRIGGER steplabel_majority_delete AFTER DELETE ON labeling_steplabel
REFERENCING OLD TABLE AS old_labels
FOR EACH STATEMENT EXECUTE FUNCTION labeling_stepmajority_refresh();

INSERT INTO labeling_stepmajority (step_id, project_id, value)
SELECT l.step_id, min(t.project_id), {MAJORITY}
{COUNT_FROM} WHERE {HUMAN_VOTE}
GROUP BY l.step_id;
"""

UNDO = """
DROP TRIGGER steplabel_majority_insert ON labeling_steplabel;
DROP TRIGGER steplabel_majority_update ON labeling_steplabel;
DROP TRIGGER steplabel_majority_delete ON labeling_steplabel;
DROP FUNCTION labeling_stepmajority_refresh();
"""


class Migration(migrations.Migration):
    dependencies = [
        ("labeling", "0002_history_verdicts_final_labels_queues"),
        ("trajectories", "0003_selections_and_exports"),
    ]

    operations = [
        migrations.CreateModel(
            name="StepMajority",
            fields=[
                (
                    "step",
                    models.OneToOneField(
                        db_constraint=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        primary_key=True,
                        related_name="+",
                        serialize=False,
                        to="trajectories.step",
                    ),
                ),
                ("value", models.IntegerField(null=True)),
                (
                    "project",
                    models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="+",
                        to="trajectories.project",
                    ),
                ),
            ],
            options={
                "indexes": [
                    models.Index(
                        condition=models.Q(("value__isnull", False)),
                        fields=["project", "step"],
                        include=("value",),
                        name="stepmajority_project_step",
                    )
                ],
            },
        ),
        migrations.RunSQL(REFRESH, UNDO),
    ]
