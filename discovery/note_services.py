"""Notes to taxonomy: the annotators' free notes (the critiques they write in episode
verdicts while reviewing) grouped by meaning with failure modes' clustering
(``discovery/modes.py``), and a group turned into an error tag of a label schema by an
admin (a new schema version, as the schema page's edit makes)."""

from __future__ import annotations

import logging

import numpy as np
from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from discovery.encoder import encoder_get
from discovery.models import NoteGroup, NoteRun
from discovery.modes import PreviousMode, failure_modes
from discovery.services import encoder_configured
from labeling.models import EpisodeVerdict, LabelSchema
from labeling.services import LabelingError, label_schema_save
from stepscope.jobs.lifecycle import job_cancel, job_end, job_fail
from stepscope.queueing import broker_require
from trajectories.models import Project

logger = logging.getLogger(__name__)

# A verdict's failure_mode (where annotators pick a tag) holds at most this many characters.
TAG_MAX_CHARS = 200


def notes_of(project: Project) -> list[tuple[int, str]]:
    """(episode verdict id, critique) of every verdict of the project with a note, oldest
    first."""
    rows = (
        EpisodeVerdict.objects.filter(trajectory__project=project)
        .exclude(critique="")
        .order_by("pk")
        .values_list("pk", "critique")
    )
    return [(pk, text) for pk, text in rows if text.strip()]


def notes_count(project: Project) -> int:
    """How many notes a run would group (one query; the service stores critiques
    stripped, so a non-empty one has words)."""
    return EpisodeVerdict.objects.filter(trajectory__project=project).exclude(critique="").count()


def note_run_start(*, project: Project, user: User | None) -> NoteRun:
    """Queue a grouping of the project's notes on the embedding queue (it encodes)."""
    from discovery.tasks import notes_group

    broker_require()  # a dead broker is said now; no run is left queued
    with transaction.atomic():
        run = NoteRun.objects.create(project=project, created_by=user)
        transaction.on_commit(
            lambda: notes_group.apply_async(args=[run.pk], queue=settings.STEPSCOPE_EMBEDDING_QUEUE)
        )
    return run


def note_run_cancel(*, run: NoteRun) -> NoteRun:
    return job_cancel(run)


def notes_execute(*, run_id: int) -> NoteRun:
    """The task's body: encode the notes, group them, store the groups in the
    transaction that ends the run (a run cancelled meanwhile stores nothing; a
    redelivered one starts again)."""
    run = NoteRun.objects.select_related("project").get(pk=run_id)
    if not run.is_active:
        return run
    NoteRun.objects.filter(pk=run.pk, status__in=NoteRun.ACTIVE).update(
        status=NoteRun.Status.RUNNING, started_at=run.started_at or timezone.now()
    )
    try:
        _execute(run)
    except Exception as error:  # recorded on the run for its row; the worker goes on
        logger.exception("note run %s failed", run.pk)
        job_fail(NoteRun, pk=run.pk, error=error)
    run.refresh_from_db()
    return run


def _execute(run: NoteRun) -> None:
    notes = notes_of(run.project)
    NoteRun.objects.filter(pk=run.pk).update(total=len(notes))
    ids = [pk for pk, _ in notes]
    texts = [text for _, text in notes]
    vectors = (
        encoder_get(encoder_configured()).encode(texts)
        if texts
        else np.zeros((0, 1), dtype=np.float32)
    )
    clustering = failure_modes(vectors, texts, ids, previous=_previous(run))
    with transaction.atomic():
        if not job_end(
            run,
            NoteRun.Status.DONE,
            done=len(notes),
            total=len(notes),
            k=len(clustering.modes),
            silhouette=clustering.silhouette,
        ):
            transaction.set_rollback(True)  # cancelled meanwhile: nothing is stored
            return
        NoteGroup.objects.bulk_create(
            NoteGroup(
                run=run,
                number=group.number,
                name=group.name[:300],
                words=list(group.words),
                size=len(group.members),
                share=len(group.members) / len(notes),
                members=[ids[i] for i in group.members],
                examples=[ids[i] for i in group.examples],
                kept=group.previous is not None,
                tag=group.description,  # kept from the run before with the number
            )
            for group in clustering.modes
        )


def _previous(run: NoteRun) -> list[PreviousMode]:
    """The groups of the project's latest finished note run before this one; a group's
    tag travels as its description, so a kept group still says which tag it became."""
    before = (
        NoteRun.objects.filter(project_id=run.project_id, status=NoteRun.Status.DONE, pk__lt=run.pk)
        .order_by("-pk")
        .first()
    )
    if before is None:
        return []
    return [
        PreviousMode(
            number=group.number,
            name=group.name,
            keys=frozenset(group.members),
            description=group.tag,
        )
        for group in before.groups.all()
    ]


def note_group_tag(*, group: NoteGroup, schema: LabelSchema, tag: str) -> LabelSchema:
    """Add ``tag`` to ``schema``'s error tags: a new version of the schema (its labels
    stay on the old one), as the schema page's edit makes; the group remembers the tag.
    LabelingError says what is wrong (field ``tag`` or ``schema``)."""
    tag = " ".join(tag.split())
    if not tag:
        raise LabelingError("Give the tag a name.", field="tag")
    if len(tag) > TAG_MAX_CHARS:
        raise LabelingError(f"A tag has at most {TAG_MAX_CHARS} characters.", field="tag")
    if schema.project_id != group.run.project_id or not schema.is_active:
        raise LabelingError("Choose an active schema of this project.", field="schema")
    if tag in schema.error_tags:
        raise LabelingError(f"{schema.name} has the tag {tag!r} already.", field="tag")
    with transaction.atomic():
        saved = label_schema_save(
            schema=schema,
            kind=schema.kind,
            values=schema.values,
            error_tags=[*schema.error_tags, tag],
            ask_rationale=schema.ask_rationale,
            first_error_mode=schema.first_error_mode,
        )
        NoteGroup.objects.filter(pk=group.pk).update(tag=tag)
    group.tag = tag
    return saved
