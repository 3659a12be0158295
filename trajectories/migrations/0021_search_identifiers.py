"""Search documents read an underscore as a hyphen, so an identifier (``basic_economy``)
is a word of its own beside its parts (``trajectories.search``). Only the documents of
texts with an underscore change; they are rebuilt here (a text not yet indexed is read
with the new expression anyway). The expressions are written out: a migration must not
change when the code does."""

from django.db import migrations

_NEW = "to_tsvector('simple'::regconfig, translate(left({column}, 100000), '_', '-'))"
_OLD = "to_tsvector('simple'::regconfig, left({column}, 100000))"


def _rebuild(document: str) -> list[str]:
    return [
        f"UPDATE trajectories_trajectorysearch x SET document = {document.format(column='t.task')}"
        " FROM trajectories_trajectory t WHERE t.id = x.trajectory_id"
        " AND strpos(left(t.task, 100000), '_') > 0",
        f"UPDATE trajectories_stepsearch x SET document = {document.format(column='s.content')}"
        " FROM trajectories_step s WHERE s.id = x.step_id"
        " AND strpos(left(s.content, 100000), '_') > 0",
    ]


class Migration(migrations.Migration):
    dependencies = [("trajectories", "0020_follow_by_worker")]

    operations = [migrations.RunSQL(_rebuild(_NEW), reverse_sql=_rebuild(_OLD))]
