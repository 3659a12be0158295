"""Export jobs and selections move to the exports app, their tables kept."""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('trajectories', '0008_importbatch_cancelled_state'),
    ]

    # State only: the tables stay where they are and now belong to the exports app
    # (exports/0001 takes them over under the same names). No SQL runs.
    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(name="ExportJob"),
                migrations.DeleteModel(name="Selection"),
            ],
            database_operations=[],
        ),
    ]
