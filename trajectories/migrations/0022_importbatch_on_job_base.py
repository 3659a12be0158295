"""Every job kind has ``started_at`` and ``error`` from ``stepscope.jobs.models.Job``
(project deletions declared theirs as the base does: nothing changes for them). An import
batch gains both: when a worker took an upload, and why the import failed as a whole (an
unknown format, a file gone), beside ``errors``, its rejected records."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("trajectories", "0021_search_identifiers"),
    ]

    operations = [
        migrations.AddField(
            model_name="importbatch",
            name="error",
            field=models.TextField(blank=True),
        ),
        migrations.AddField(
            model_name="importbatch",
            name="started_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
