"""Export jobs and selections, moved from trajectories: their tables (created by
trajectories/0003) are kept under the same names, so this takes them over in the
migration state only and runs no SQL but the content type rename."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps


MOVED = ("exportjob", "selection")


def content_types_move(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    """The content types (and with them permissions and admin log entries) follow the
    models. A new database has none yet: they are created after every migration."""
    content_type = apps.get_model("contenttypes", "ContentType")
    content_type.objects.filter(app_label="trajectories", model__in=MOVED).update(
        app_label="exports"
    )


def content_types_return(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    content_type = apps.get_model("contenttypes", "ContentType")
    content_type.objects.filter(app_label="exports", model__in=MOVED).update(
        app_label="trajectories"
    )


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('trajectories', '0009_move_exports_out'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='ExportJob',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('status', models.CharField(choices=[('queued', 'Queued'), ('running', 'Running'), ('done', 'Done'), ('failed', 'Failed'), ('cancelled', 'Cancelled')], default='queued', max_length=10)),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                        ('finished_at', models.DateTimeField(blank=True, null=True)),
                        ('format', models.CharField(max_length=30)),
                        ('container', models.CharField(blank=True, max_length=10)),
                        ('compress', models.BooleanField(default=False)),
                        ('label_source', models.CharField(max_length=200)),
                        ('neutral', models.CharField(max_length=10)),
                        ('options', models.JSONField(blank=True, default=dict)),
                        ('selection_name', models.CharField(blank=True, max_length=100)),
                        ('selection', models.JSONField(blank=True, default=dict)),
                        ('split', models.CharField(blank=True, max_length=200)),
                        ('seed', models.IntegerField(default=0)),
                        ('done', models.PositiveIntegerField(default=0)),
                        ('total', models.PositiveIntegerField(default=0)),
                        ('out_dir', models.CharField(blank=True, max_length=500)),
                        ('files', models.JSONField(blank=True, default=list)),
                        ('manifest', models.JSONField(blank=True, null=True)),
                        ('row_count', models.PositiveBigIntegerField(default=0)),
                        ('error', models.TextField(blank=True)),
                        ('created_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, to=settings.AUTH_USER_MODEL)),
                        ('project', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='export_jobs', to='trajectories.project')),
                    ],
                    options={
                        'db_table': 'trajectories_exportjob',
                        'ordering': ['-created_at'],
                    },
                ),
                migrations.CreateModel(
                    name='Selection',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('name', models.SlugField(max_length=100)),
                        ('definition', models.JSONField(blank=True, default=dict)),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                        ('created_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, to=settings.AUTH_USER_MODEL)),
                        ('project', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='selections', to='trajectories.project')),
                    ],
                    options={
                        'db_table': 'trajectories_selection',
                        'constraints': [models.UniqueConstraint(fields=('project', 'name'), name='selection_unique_name')],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(content_types_move, content_types_return, elidable=False),
    ]
