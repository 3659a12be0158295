"""QueueCounts: each queue's items and complete items (as many submitted assignments as
its overlap), kept by triggers instead of counted on every view of the queue list and the
labeling page (a lateral count over the assignments of every item: 0.5 s for a queue of
600,000 items).

Triggers rather than service code keep them, as the step majority (migration 0008) is
kept: every writer of the items and the assignments (the queue's creation from a
selection, the items a rule or the disagreements page adds, leases, skips, expiries,
submits one at a time or in bulk, the cascades of a project's deletion, an admin's edit)
then keeps them in its own transaction without knowing of them.

- QueueAnnotatorCounts: per queue and annotator, the items they submitted ("submitted by
  you"), moved by the same functions.
- A queue gets its row (zeros) when it is made.
- Items added or removed move ``items``; an item removed while it still had as many
  submitted assignments as the overlap takes one from ``complete``, and its submitted
  assignments still there from their annotators' counts. (Items never move from one
  queue to another.)
- The assignments function finds the items whose number of submitted assignments the
  statement changed, locks them in id order (concurrent writers of one item then count
  one after the other, each after the previous committed, and cannot deadlock), counts
  each item's submitted assignments now and before the statement (now less the
  statement's change), and moves ``complete`` of their queues, locked in queue order,
  by the items that crossed the overlap either way; then the annotators' counts (a row
  made only for a submit: a count going down never makes one, so a cascade that removed
  the row first, a user's deletion, leaves none behind).
- A change of a queue's overlap counts its complete items again.
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

SUBMITTED = "labeling_queueassignment a WHERE a.item_id = {item} AND a.status = 'submitted'"

CREATE = f"""
CREATE FUNCTION labeling_queuecounts_queue() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO labeling_queuecounts (queue_id, items, complete) VALUES (NEW.id, 0, 0)
        ON CONFLICT (queue_id) DO NOTHING;
    ELSE
        UPDATE labeling_queuecounts k SET complete = (
            SELECT count(*) FROM labeling_queueitem i
            WHERE i.queue_id = NEW.id
              AND (SELECT count(*) FROM {SUBMITTED.format(item="i.id")}) >= NEW.overlap)
        WHERE k.queue_id = NEW.id;
    END IF;
    RETURN NULL;
END
$$;

CREATE FUNCTION labeling_queuecounts_items() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    queues bigint[];
    added int[];
    completed int[];
BEGIN
    IF TG_OP = 'INSERT' THEN
        SELECT array_agg(c.queue_id ORDER BY c.queue_id), array_agg(c.n ORDER BY c.queue_id),
               array_agg(0)
        INTO queues, added, completed
        FROM (SELECT queue_id, count(*)::int AS n FROM new_items GROUP BY queue_id) c;
    ELSE
        SELECT array_agg(c.queue_id ORDER BY c.queue_id), array_agg(-c.n ORDER BY c.queue_id),
               array_agg(-c.complete ORDER BY c.queue_id)
        INTO queues, added, completed
        FROM (
            SELECT i.queue_id, count(*)::int AS n,
                   count(*) FILTER (
                       WHERE (SELECT count(*) FROM {SUBMITTED.format(item="i.id")}) >= q.overlap
                   )::int AS complete
            FROM old_items i JOIN labeling_queue q ON q.id = i.queue_id
            GROUP BY i.queue_id
        ) c;
    END IF;
    IF queues IS NULL THEN
        RETURN NULL;
    END IF;
    PERFORM 1 FROM labeling_queuecounts k WHERE k.queue_id = ANY(queues)
    ORDER BY k.queue_id FOR UPDATE;
    UPDATE labeling_queuecounts k
    SET items = k.items + c.added, complete = k.complete + c.completed
    FROM unnest(queues, added, completed) AS c(queue_id, added, completed)
    WHERE k.queue_id = c.queue_id;
    IF TG_OP = 'DELETE' THEN
        UPDATE labeling_queueannotatorcounts k SET submitted = k.submitted - d.n
        FROM (
            SELECT i.queue_id, a.annotator_id, count(*)::int AS n
            FROM old_items i JOIN labeling_queueassignment a
              ON a.item_id = i.id AND a.status = 'submitted'
            GROUP BY i.queue_id, a.annotator_id
        ) d
        WHERE k.queue_id = d.queue_id AND k.annotator_id = d.annotator_id;
    END IF;
    RETURN NULL;
END
$$;

CREATE FUNCTION labeling_queuecounts_assignments() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    items bigint[];
    annotators int[];
    changes int[];
    queues bigint[];
    moved int[];
BEGIN
    -- Per item and annotator, the submitted assignments the statement added (less those
    -- it took away).
    IF TG_OP = 'INSERT' THEN
        SELECT array_agg(c.item_id ORDER BY c.item_id, c.annotator_id),
               array_agg(c.annotator_id ORDER BY c.item_id, c.annotator_id),
               array_agg(c.n ORDER BY c.item_id, c.annotator_id)
        INTO items, annotators, changes
        FROM (SELECT item_id, annotator_id, count(*)::int AS n FROM new_rows
              WHERE status = 'submitted' GROUP BY item_id, annotator_id) c;
    ELSIF TG_OP = 'DELETE' THEN
        SELECT array_agg(c.item_id ORDER BY c.item_id, c.annotator_id),
               array_agg(c.annotator_id ORDER BY c.item_id, c.annotator_id),
               array_agg(-c.n ORDER BY c.item_id, c.annotator_id)
        INTO items, annotators, changes
        FROM (SELECT item_id, annotator_id, count(*)::int AS n FROM old_rows
              WHERE status = 'submitted' GROUP BY item_id, annotator_id) c;
    ELSE
        SELECT array_agg(c.item_id ORDER BY c.item_id, c.annotator_id),
               array_agg(c.annotator_id ORDER BY c.item_id, c.annotator_id),
               array_agg(c.n ORDER BY c.item_id, c.annotator_id)
        INTO items, annotators, changes
        FROM (
            SELECT item_id, annotator_id, sum(n)::int AS n FROM (
                SELECT item_id, annotator_id, 1 AS n FROM new_rows WHERE status = 'submitted'
                UNION ALL
                SELECT item_id, annotator_id, -1 AS n FROM old_rows WHERE status = 'submitted'
            ) side GROUP BY item_id, annotator_id HAVING sum(n) <> 0
        ) c;
    END IF;
    IF items IS NULL THEN
        RETURN NULL;
    END IF;
    PERFORM 1 FROM labeling_queueitem i WHERE i.id = ANY(items) ORDER BY i.id FOR UPDATE;
    -- Counted after the lock, with a snapshot that sees every earlier writer's commit.
    SELECT array_agg(m.queue_id ORDER BY m.queue_id), array_agg(m.moved ORDER BY m.queue_id)
    INTO queues, moved
    FROM (
        SELECT i.queue_id, sum((cur.n >= q.overlap)::int - (cur.n - c.change >= q.overlap)::int)
               ::int AS moved
        FROM (
            SELECT u.item_id, sum(u.change)::int AS change
            FROM unnest(items, changes) AS u(item_id, change) GROUP BY u.item_id
        ) c
        JOIN labeling_queueitem i ON i.id = c.item_id
        JOIN labeling_queue q ON q.id = i.queue_id
        CROSS JOIN LATERAL (SELECT count(*) AS n FROM {SUBMITTED.format(item="c.item_id")}) cur
        GROUP BY i.queue_id
    ) m WHERE m.moved <> 0;
    IF queues IS NOT NULL THEN
        PERFORM 1 FROM labeling_queuecounts k WHERE k.queue_id = ANY(queues)
        ORDER BY k.queue_id FOR UPDATE;
        UPDATE labeling_queuecounts k SET complete = k.complete + c.moved
        FROM unnest(queues, moved) AS c(queue_id, moved) WHERE k.queue_id = c.queue_id;
    END IF;
    -- The annotators' counts, in key order.
    INSERT INTO labeling_queueannotatorcounts AS k (queue_id, annotator_id, submitted)
    SELECT d.queue_id, d.annotator_id, d.change FROM (
        SELECT i.queue_id, u.annotator_id, sum(u.change)::int AS change
        FROM unnest(items, annotators, changes) AS u(item_id, annotator_id, change)
        JOIN labeling_queueitem i ON i.id = u.item_id
        GROUP BY i.queue_id, u.annotator_id
    ) d WHERE d.change > 0
    ORDER BY d.queue_id, d.annotator_id
    ON CONFLICT (queue_id, annotator_id) DO UPDATE SET submitted = k.submitted + EXCLUDED.submitted;
    UPDATE labeling_queueannotatorcounts k SET submitted = k.submitted + d.change FROM (
        SELECT i.queue_id, u.annotator_id, sum(u.change)::int AS change
        FROM unnest(items, annotators, changes) AS u(item_id, annotator_id, change)
        JOIN labeling_queueitem i ON i.id = u.item_id
        GROUP BY i.queue_id, u.annotator_id
    ) d WHERE d.change < 0 AND k.queue_id = d.queue_id AND k.annotator_id = d.annotator_id;
    RETURN NULL;
END
$$;

CREATE TRIGGER queue_counts_insert AFTER INSERT ON labeling_queue
FOR EACH ROW EXECUTE FUNCTION labeling_queuecounts_queue();
CREATE TRIGGER queue_counts_overlap AFTER UPDATE OF overlap ON labeling_queue
FOR EACH ROW WHEN (OLD.overlap IS DISTINCT FROM NEW.overlap)
EXECUTE FUNCTION labeling_queuecounts_queue();

CREATE TRIGGER queueitem_counts_insert AFTER INSERT ON labeling_queueitem
REFERENCING NEW TABLE AS new_items
FOR EACH STATEMENT EXECUTE FUNCTION labeling_queuecounts_items();
CREATE TRIGGER queueitem_counts_delete AFTER DELETE ON labeling_queueitem
REFERENCING OLD TABLE AS old_items
FOR EACH STATEMENT EXECUTE FUNCTION labeling_queuecounts_items();

CREATE TRIGGER queueassignment_counts_insert AFTER INSERT ON labeling_queueassignment
REFERENCING NEW TABLE AS new_rows
FOR EACH STATEMENT EXECUTE FUNCTION labeling_queuecounts_assignments();
CREATE TRIGGER queueassignment_counts_update AFTER UPDATE ON labeling_queueassignment
REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
FOR EACH STATEMENT EXECUTE FUNCTION labeling_queuecounts_assignments();
CREATE TRIGGER queueassignment_counts_delete AFTER DELETE ON labeling_queueassignment
REFERENCING OLD TABLE AS old_rows
FOR EACH STATEMENT EXECUTE FUNCTION labeling_queuecounts_assignments();

INSERT INTO labeling_queuecounts (queue_id, items, complete)
SELECT q.id, count(i.id), count(i.id) FILTER (WHERE done.n >= q.overlap)
FROM labeling_queue q
LEFT JOIN labeling_queueitem i ON i.queue_id = q.id
LEFT JOIN (SELECT item_id, count(*) AS n FROM labeling_queueassignment
           WHERE status = 'submitted' GROUP BY item_id) done ON done.item_id = i.id
GROUP BY q.id;

INSERT INTO labeling_queueannotatorcounts (queue_id, annotator_id, submitted)
SELECT i.queue_id, a.annotator_id, count(*)
FROM labeling_queueassignment a JOIN labeling_queueitem i ON i.id = a.item_id
WHERE a.status = 'submitted'
GROUP BY i.queue_id, a.annotator_id;
"""

DROP = """
DROP TRIGGER queue_counts_insert ON labeling_queue;
DROP TRIGGER queue_counts_overlap ON labeling_queue;
DROP TRIGGER queueitem_counts_insert ON labeling_queueitem;
DROP TRIGGER queueitem_counts_delete ON labeling_queueitem;
DROP TRIGGER queueassignment_counts_insert ON labeling_queueassignment;
DROP TRIGGER queueassignment_counts_update ON labeling_queueassignment;
DROP TRIGGER queueassignment_counts_delete ON labeling_queueassignment;
DROP FUNCTION labeling_queuecounts_queue();
DROP FUNCTION labeling_queuecounts_items();
DROP FUNCTION labeling_queuecounts_assignments();
DELETE FROM labeling_queuecounts;
DELETE FROM labeling_queueannotatorcounts;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("labeling", "0014_final_spans"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="QueueCounts",
            fields=[
                (
                    "queue",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="counts",
                        serialize=False,
                        to="labeling.queue",
                    ),
                ),
                ("items", models.PositiveIntegerField(default=0)),
                ("complete", models.PositiveIntegerField(default=0)),
            ],
        ),
        migrations.CreateModel(
            name="QueueAnnotatorCounts",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("submitted", models.PositiveIntegerField(default=0)),
                (
                    "annotator",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                (
                    "queue",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="labeling.queue",
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("queue", "annotator"), name="queueannotatorcounts_unique"
                    )
                ],
            },
        ),
        migrations.RunSQL(CREATE, DROP),
    ]
