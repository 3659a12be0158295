"""StepMajority per step and label schema: each schema (by name) has its own majority,
so ``human:majority`` of one schema never counts another's labels.

The table is derived data, so it is dropped and made again with its new key (step,
schema name) rather than altered, and recounted from the labels at the end: a project
with one schema gets the same rows it had, now under that schema's name.

One statement-level function serves the three triggers (insert, update, delete), as in
migration 0003: it finds the (step, schema name) pairs whose human votes the statement may
have changed (for an update, only rows whose step, annotator, schema, value or status
changed, on either side), makes sure each has a row and locks those rows in key order (so
concurrent writers cannot deadlock, and each recount runs after the previous writer of
that step committed), recounts them, and drops the rows with no vote left. The project
comes from the schema, so the recount joins no steps.
"""

import importlib

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
VOTES = (
    "labeling_steplabel l JOIN auth_user u ON u.id = l.annotator_id"
    " JOIN labeling_labelschema sc ON sc.id = l.schema_id"
)
KEYS = "unnest(steps, names, projects) AS c(step_id, schema_name, project_id)"

REFRESH = f"""
CREATE FUNCTION labeling_stepmajority_refresh() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    steps bigint[];
    names text[];
    projects bigint[];
BEGIN
    IF TG_OP = 'INSERT' THEN
        SELECT array_agg(k.step_id), array_agg(k.name), array_agg(k.project_id)
        INTO steps, names, projects FROM (
            SELECT DISTINCT l.step_id, sc.name, sc.project_id FROM new_labels l
            JOIN auth_user u ON u.id = l.annotator_id
            JOIN labeling_labelschema sc ON sc.id = l.schema_id WHERE {HUMAN_VOTE}
        ) k;
    ELSIF TG_OP = 'DELETE' THEN
        SELECT array_agg(k.step_id), array_agg(k.name), array_agg(k.project_id)
        INTO steps, names, projects FROM (
            SELECT DISTINCT l.step_id, sc.name, sc.project_id FROM old_labels l
            JOIN auth_user u ON u.id = l.annotator_id
            JOIN labeling_labelschema sc ON sc.id = l.schema_id WHERE {HUMAN_VOTE}
        ) k;
    ELSE
        SELECT array_agg(k.step_id), array_agg(k.name), array_agg(k.project_id)
        INTO steps, names, projects FROM (
            SELECT DISTINCT l.step_id, sc.name, sc.project_id FROM (
                SELECT side.* FROM new_labels n JOIN old_labels o ON o.id = n.id
                CROSS JOIN LATERAL (
                    VALUES (n.step_id, n.annotator_id, n.schema_id, n.status),
                           (o.step_id, o.annotator_id, o.schema_id, o.status)
                ) AS side(step_id, annotator_id, schema_id, status)
                WHERE (n.step_id, n.annotator_id, n.schema_id, n.value, n.status)
                      IS DISTINCT FROM (o.step_id, o.annotator_id, o.schema_id, o.value, o.status)
            ) l JOIN auth_user u ON u.id = l.annotator_id
            JOIN labeling_labelschema sc ON sc.id = l.schema_id WHERE {HUMAN_VOTE}
        ) k;
    END IF;
    IF steps IS NULL THEN
        RETURN NULL;
    END IF;
    INSERT INTO labeling_stepmajority (step_id, schema_name, project_id, value)
    SELECT c.step_id, c.schema_name, c.project_id, NULL FROM {KEYS}
    ORDER BY c.step_id, c.schema_name
    ON CONFLICT (step_id, schema_name) DO NOTHING;
    PERFORM 1 FROM labeling_stepmajority m JOIN {KEYS}
        ON m.step_id = c.step_id AND m.schema_name = c.schema_name
    ORDER BY m.step_id, m.schema_name FOR UPDATE OF m;
    INSERT INTO labeling_stepmajority AS m (step_id, schema_name, project_id, value)
    SELECT c.step_id, c.schema_name, min(c.project_id), {MAJORITY}
    FROM {KEYS} JOIN labeling_steplabel l ON l.step_id = c.step_id
    JOIN labeling_labelschema sc ON sc.id = l.schema_id AND sc.name = c.schema_name
        AND sc.project_id = c.project_id
    JOIN auth_user u ON u.id = l.annotator_id
    WHERE {HUMAN_VOTE}
    GROUP BY c.step_id, c.schema_name
    ON CONFLICT (step_id, schema_name) DO UPDATE SET value = EXCLUDED.value
    WHERE m.value IS DISTINCT FROM EXCLUDED.value;
    DELETE FROM labeling_stepmajority m USING {KEYS}
    WHERE m.step_id = c.step_id AND m.schema_name = c.schema_name AND NOT EXISTS (
        SELECT 1 FROM {VOTES}
        WHERE l.step_id = m.step_id AND sc.name = m.schema_name
        AND sc.project_id = m.project_id AND {HUMAN_VOTE}
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

INSERT INTO labeling_stepmajority (step_id, schema_name, project_id, value)
SELECT l.step_id, sc.name, min(sc.project_id), {MAJORITY}
FROM {VOTES} WHERE {HUMAN_VOTE}
GROUP BY l.step_id, sc.name;
"""

DROP = """
DROP TRIGGER steplabel_majority_insert ON labeling_steplabel;
DROP TRIGGER steplabel_majority_update ON labeling_steplabel;
DROP TRIGGER steplabel_majority_delete ON labeling_steplabel;
DROP FUNCTION labeling_stepmajority_refresh();
"""

# Going back recounts the per-step majority of migration 0003 (its function, triggers
# and first count).
PER_STEP = importlib.import_module("labeling.migrations.0003_step_majority").REFRESH


class Migration(migrations.Migration):
    dependencies = [
        ("labeling", "0007_steplabel_annotator_schema_index"),
        ("trajectories", "0003_selections_and_exports"),
    ]

    operations = [
        migrations.RunSQL(DROP, PER_STEP),
        migrations.DeleteModel(name="StepMajority"),
        migrations.CreateModel(
            name="StepMajority",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "step",
                        "schema_name",
                        blank=True,
                        editable=False,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                (
                    "step",
                    models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="+",
                        to="trajectories.step",
                    ),
                ),
                ("schema_name", models.CharField(max_length=100)),
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
                ("value", models.IntegerField(null=True)),
            ],
            options={
                "indexes": [
                    models.Index(
                        condition=models.Q(("value__isnull", False)),
                        fields=["project", "schema_name", "step"],
                        include=("value",),
                        name="stepmajority_project_schema",
                    )
                ],
            },
        ),
        migrations.RunSQL(REFRESH, DROP),
    ]
