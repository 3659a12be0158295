"""Superseded step labels: of an annotator's submitted labels on one step under the
versions of one schema, only the newest version's counts.

Editing a schema's values or tags makes a new version, and an annotator who labels a step
again under it makes a second row (labels are unique per step, annotator and schema).
Both counted: the annotator voted twice in the majority, ``human:<user>`` gave the step
two labels (which exports refused), and agreement compared the annotator with themself.

One statement-level function serves three triggers (insert, update, delete). It keeps,
among the statement's schemas, those that have another version (a project whose schema
was never edited pays one pass over the statement's schema ids and nothing more), takes
the (step, annotator) of each row of theirs whose counting may have changed, ranks those
keys' submitted and superseded labels under each schema name by version, and marks the
newest ``submitted`` and the rest ``superseded``. Drafts take no part: an older label
counts until the newer one is submitted. The update it makes fires the majority triggers
(migration 0003), which recount those steps, and this function again, which finds
nothing left to change. Existing labels are ranked once at the end, and of a step's
adjudicated labels under one schema name only the newest version's stays (the service
keeps it so from now on; the history rows of those removed stay).
"""

from django.db import migrations, models

# The labels that take part: submitted ones count, superseded ones wait to count again.
RANKED = "('submitted', 'superseded')"
# Each label's status as the rule has it: the newest version's label under a schema name
# counts, for each step and annotator.
COUNTED = (
    "CASE WHEN row_number() OVER (PARTITION BY l.step_id, l.annotator_id, sc.project_id,"
    " sc.name ORDER BY sc.version DESC) = 1 THEN 'submitted' ELSE 'superseded' END"
)

SUPERSEDE = f"""
CREATE FUNCTION labeling_steplabel_supersede() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    versioned bigint[];
    steps bigint[];
    annotators integer[];
BEGIN
    -- Fired by its own update below: that statement left the rule holding.
    IF pg_trigger_depth() > 1 THEN
        RETURN NULL;
    END IF;
    IF TG_OP = 'INSERT' THEN
        SELECT array_agg(DISTINCT n.schema_id) INTO versioned FROM new_labels n;
    ELSIF TG_OP = 'DELETE' THEN
        SELECT array_agg(DISTINCT o.schema_id) INTO versioned FROM old_labels o;
    ELSE
        SELECT array_agg(DISTINCT side.schema_id) INTO versioned FROM (
            SELECT n.schema_id FROM new_labels n UNION ALL SELECT o.schema_id FROM old_labels o
        ) side;
    END IF;
    SELECT array_agg(sc.id) INTO versioned FROM labeling_labelschema sc
    WHERE sc.id = ANY(versioned) AND EXISTS (
        SELECT 1 FROM labeling_labelschema other WHERE other.project_id = sc.project_id
        AND other.name = sc.name AND other.id <> sc.id
    );
    IF versioned IS NULL THEN
        RETURN NULL;
    END IF;
    IF TG_OP = 'INSERT' THEN
        SELECT array_agg(n.step_id), array_agg(n.annotator_id) INTO steps, annotators
        FROM new_labels n WHERE n.schema_id = ANY(versioned) AND n.status IN {RANKED};
    ELSIF TG_OP = 'DELETE' THEN
        SELECT array_agg(o.step_id), array_agg(o.annotator_id) INTO steps, annotators
        FROM old_labels o WHERE o.schema_id = ANY(versioned) AND o.status IN {RANKED};
    ELSE
        SELECT array_agg(side.step_id), array_agg(side.annotator_id) INTO steps, annotators
        FROM new_labels n JOIN old_labels o ON o.id = n.id
        CROSS JOIN LATERAL (VALUES (n.step_id, n.annotator_id, n.schema_id, n.status),
                                   (o.step_id, o.annotator_id, o.schema_id, o.status))
            AS side(step_id, annotator_id, schema_id, status)
        WHERE (n.step_id, n.annotator_id, n.schema_id, n.status)
              IS DISTINCT FROM (o.step_id, o.annotator_id, o.schema_id, o.status)
        AND side.schema_id = ANY(versioned) AND side.status IN {RANKED};
    END IF;
    IF steps IS NULL THEN
        RETURN NULL;
    END IF;
    WITH keys AS (
        SELECT DISTINCT k.step_id, k.annotator_id FROM unnest(steps, annotators)
            AS k(step_id, annotator_id)
    ), ranked AS (
        SELECT l.id, l.status, {COUNTED} AS counted
        FROM keys k
        JOIN labeling_steplabel l ON l.step_id = k.step_id AND l.annotator_id = k.annotator_id
        JOIN labeling_labelschema sc ON sc.id = l.schema_id
        WHERE l.status IN {RANKED} AND (sc.project_id, sc.name) IN (
            SELECT v.project_id, v.name FROM labeling_labelschema v WHERE v.id = ANY(versioned)
        )
    )
    UPDATE labeling_steplabel l SET status = r.counted FROM ranked r
    WHERE l.id = r.id AND r.status <> r.counted;
    RETURN NULL;
END
$$;

CREATE TRIGGER steplabel_supersede_insert AFTER INSERT ON labeling_steplabel
REFERENCING NEW TABLE AS new_labels
FOR EACH STATEMENT EXECUTE FUNCTION labeling_steplabel_supersede();
CREATE TRIGGER steplabel_supersede_update AFTER UPDATE ON labeling_steplabel
REFERENCING OLD TABLE AS old_labels NEW TABLE AS new_labels
FOR EACH STATEMENT EXECUTE FUNCTION labeling_steplabel_supersede();
CREATE TRIGGER steplabel_supersede_delete AFTER DELETE ON labeling_steplabel
REFERENCING OLD TABLE AS old_labels
FOR EACH STATEMENT EXECUTE FUNCTION labeling_steplabel_supersede();

WITH ranked AS (
    SELECT l.id, l.status, {COUNTED} AS counted
    FROM labeling_steplabel l JOIN labeling_labelschema sc ON sc.id = l.schema_id
    WHERE l.status IN {RANKED} AND EXISTS (
        SELECT 1 FROM labeling_labelschema other WHERE other.project_id = sc.project_id
        AND other.name = sc.name AND other.id <> sc.id
    )
)
UPDATE labeling_steplabel l SET status = r.counted FROM ranked r
WHERE l.id = r.id AND r.status <> r.counted;

DELETE FROM labeling_finallabel f USING labeling_labelschema sc
WHERE sc.id = f.schema_id AND EXISTS (
    SELECT 1 FROM labeling_finallabel newer
    JOIN labeling_labelschema newer_schema ON newer_schema.id = newer.schema_id
    WHERE newer.step_id = f.step_id AND newer_schema.project_id = sc.project_id
    AND newer_schema.name = sc.name AND newer_schema.version > sc.version
);
"""

UNDO = """
DROP TRIGGER steplabel_supersede_insert ON labeling_steplabel;
DROP TRIGGER steplabel_supersede_update ON labeling_steplabel;
DROP TRIGGER steplabel_supersede_delete ON labeling_steplabel;
DROP FUNCTION labeling_steplabel_supersede();
UPDATE labeling_steplabel SET status = 'submitted' WHERE status = 'superseded';
"""

STATUS = models.CharField(
    choices=[("draft", "Draft"), ("submitted", "Submitted"), ("superseded", "Superseded")],
    default="submitted",
    max_length=10,
)


class Migration(migrations.Migration):
    dependencies = [("labeling", "0005_decisive_failure")]

    operations = [
        migrations.AlterField(model_name="steplabel", name="status", field=STATUS),
        migrations.AlterField(model_name="steplabelevent", name="status", field=STATUS),
        migrations.RunSQL(SUPERSEDE, UNDO),
    ]
