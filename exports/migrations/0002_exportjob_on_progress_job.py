"""An export job stands on ``stepscope.jobs.models.ProgressJob``: its ``done``, ``total``
and ``error`` columns were declared on it as the base declares them (nothing changes for
them), and it gains the base's ``started_at``, set when a worker takes it."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("exports", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="exportjob",
            name="started_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
