"""Label writes: upsert, validation, undo from history, verdicts, schema versions."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from labeling.models import LabelSchema, Queue, StepLabel, StepLabelEvent, TrajectoryLabel
from labeling.services import (
    LabelingError,
    StaleSchema,
    label_schema_save,
    step_label_set,
    step_label_undo,
    trajectory_submit,
)
from tests.factories import trajectory_with_steps
from tests.labeling.conftest import leased_state, state, step_at
from tests.trajectories.test_views import imported_label
from trajectories.models import Project, Step, Trajectory


def test_double_post_gives_one_label(owner: User, trajectory: Trajectory) -> None:
    step = step_at(trajectory, 0)
    first = step_label_set(state=state(owner, trajectory), step=step, value=1)
    second = step_label_set(state=state(owner, trajectory), step=step, value=1)
    assert first.created and not second.created
    assert first.label_id == second.label_id
    assert StepLabel.objects.filter(step=step).count() == 1
    # The repeat changed nothing, so the history holds one event.
    assert StepLabelEvent.objects.filter(step_id=step.pk).count() == 1


def test_two_annotators_keep_their_own_labels(
    queue: Queue, annotator: User, annotator2: User, trajectory: Trajectory
) -> None:
    step = step_at(trajectory, 1)
    step_label_set(state=leased_state(annotator, queue), step=step, value=-1)
    step_label_set(state=leased_state(annotator2, queue), step=step, value=1)
    values = dict(StepLabel.objects.filter(step=step).values_list("annotator__username", "value"))
    assert values == {"annotator": -1, "annotator2": 1}


def test_annotator_without_a_lease_may_not_label(annotator: User, trajectory: Trajectory) -> None:
    with pytest.raises(LabelingError) as error:
        step_label_set(state=state(annotator, trajectory), step=step_at(trajectory, 0), value=1)
    assert error.value.status == 403
    assert StepLabel.objects.count() == 0


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"value": 7}, "7 is not a value of step quality v1"),
        ({"value": 1, "tags": ["typo"]}, "Unknown tag: typo."),
        ({"value": 1, "correction": "Should say 9."}, "A correction goes with a step labelled"),
        ({"tags": ["logic error"]}, "Label step 0 first"),
    ],
)
def test_bad_input_is_refused_and_nothing_changes(
    owner: User, trajectory: Trajectory, fields: dict[str, object], message: str
) -> None:
    with pytest.raises(LabelingError) as error:
        step_label_set(state=state(owner, trajectory), step=step_at(trajectory, 0), **fields)  # type: ignore[arg-type]
    assert error.value.status == 400
    assert message in error.value.message
    assert StepLabel.objects.count() == 0
    assert StepLabelEvent.objects.count() == 0


def test_non_labelable_step_is_refused(owner: User, trajectory: Trajectory) -> None:
    Step.objects.filter(trajectory=trajectory, index=0).update(labelable=False)
    with pytest.raises(LabelingError, match="Step 0 is not labelable"):
        step_label_set(state=state(owner, trajectory), step=step_at(trajectory, 0), value=1)


def test_stale_schema_version_is_refused(
    owner: User, trajectory: Trajectory, schema: LabelSchema
) -> None:
    page_state = state(owner, trajectory)
    label_schema_save(
        schema=schema,
        kind=schema.kind,
        values=[
            *schema.values[:2],
            {"value": 1, "name": "correct", "color": "#00aa00", "key": "3"},
        ],
        error_tags=schema.error_tags,
        ask_rationale=False,
        first_error_mode=False,
    )
    with pytest.raises(StaleSchema) as error:
        step_label_set(
            state=state(owner, trajectory),
            step=step_at(trajectory, 0),
            value=1,
            schema_id=page_state.schema.pk if page_state.schema else None,
        )
    assert error.value.status == 409
    assert "now uses v2" in error.value.message


def test_schema_edit_of_colours_stays_the_same_version(schema: LabelSchema) -> None:
    values = [dict(v, color="#123456") for v in schema.values]
    saved = label_schema_save(
        schema=schema,
        kind=schema.kind,
        values=values,
        error_tags=schema.error_tags,
        ask_rationale=True,
        first_error_mode=True,
    )
    assert saved.pk == schema.pk and saved.version == 1 and saved.first_error_mode


def test_schema_edit_of_values_makes_a_new_version_and_old_labels_keep_theirs(
    owner: User, trajectory: Trajectory, schema: LabelSchema
) -> None:
    step_label_set(state=state(owner, trajectory), step=step_at(trajectory, 0), value=0)
    saved = label_schema_save(
        schema=schema,
        kind=LabelSchema.Kind.BINARY,
        values=[
            {"value": -1, "name": "wrong", "key": "1", "color": "#ff0000"},
            {"value": 1, "name": "right", "key": "2", "color": "#00ff00"},
        ],
        error_tags=[],
        ask_rationale=False,
        first_error_mode=False,
    )
    assert saved.version == 2 and saved.pk != schema.pk
    schema.refresh_from_db()
    assert not schema.is_active
    label = StepLabel.objects.get()
    assert label.schema_id == schema.pk and label.value == 0


def test_undo_walks_back_through_history(owner: User, trajectory: Trajectory) -> None:
    first, second = step_at(trajectory, 0), step_at(trajectory, 1)
    step_label_set(state=state(owner, trajectory), step=first, value=1)
    step_label_set(state=state(owner, trajectory), step=first, value=-1, tags=None)
    step_label_set(
        state=state(owner, trajectory),
        step=first,
        value=None,
        tags=["logic error"],
        rationale="x is 3, not 4",
    )
    step_label_set(state=state(owner, trajectory), step=second, value=0)

    def current() -> dict[int, tuple[int, list[str], str]]:
        return {
            label.step.index: (label.value, label.tags, label.rationale)
            for label in StepLabel.objects.select_related("step")
        }

    assert current() == {0: (-1, ["logic error"], "x is 3, not 4"), 1: (0, [], "")}
    assert step_label_undo(state=state(owner, trajectory)) == second.pk
    assert current() == {0: (-1, ["logic error"], "x is 3, not 4")}
    assert step_label_undo(state=state(owner, trajectory)) == first.pk
    assert current() == {0: (-1, [], "")}
    assert step_label_undo(state=state(owner, trajectory)) == first.pk
    assert current() == {0: (1, [], "")}
    # A new label after undoing becomes the next thing to undo.
    step_label_set(state=state(owner, trajectory), step=second, value=1)
    assert step_label_undo(state=state(owner, trajectory)) == second.pk
    assert step_label_undo(state=state(owner, trajectory)) == first.pk
    assert current() == {}
    with pytest.raises(LabelingError, match="Nothing to undo"):
        step_label_undo(state=state(owner, trajectory))
    # Every change, undos included, stays in the history.
    assert StepLabelEvent.objects.filter(step__trajectory=trajectory).count() == 10


def test_first_error_is_the_earliest_error_label(owner: User, trajectory: Trajectory) -> None:
    step_label_set(state=state(owner, trajectory), step=step_at(trajectory, 3), value=-1)
    assert state(owner, trajectory).first_error_index == 3
    step_label_set(state=state(owner, trajectory), step=step_at(trajectory, 1), first_error=True)
    verdict = TrajectoryLabel.objects.get()
    assert (verdict.first_error_index, verdict.finish_reason) == (1, "found_error")
    step_label_set(state=state(owner, trajectory), step=step_at(trajectory, 1), value=1)
    assert state(owner, trajectory).first_error_index == 3


def test_first_error_mode_asks_only_up_to_the_first_error(
    owner: User, trajectory: Trajectory, schema: LabelSchema
) -> None:
    schema.first_error_mode = True
    schema.save()
    for index, value in [(0, 1), (1, 1), (2, -1)]:
        step_label_set(state=state(owner, trajectory), step=step_at(trajectory, index), value=value)
    current = state(owner, trajectory)
    assert (current.done, current.to_label, current.complete) == (3, 3, True)
    verdict = trajectory_submit(state=current)
    assert verdict.finish_reason == "found_error"
    assert set(StepLabel.objects.values_list("status", flat=True)) == {"submitted"}


def test_submit_needs_every_step_unless_giving_up(owner: User, trajectory: Trajectory) -> None:
    step_label_set(state=state(owner, trajectory), step=step_at(trajectory, 0), value=1)
    with pytest.raises(LabelingError, match="4 steps still need a label"):
        trajectory_submit(state=state(owner, trajectory))
    verdict = trajectory_submit(
        state=state(owner, trajectory), flagged=True, comment="The question is ambiguous."
    )
    assert (verdict.status, verdict.finish_reason, verdict.flagged) == (
        "submitted",
        "bad_problem",
        True,
    )


def test_submit_is_not_an_undoable_change(owner: User, trajectory: Trajectory) -> None:
    for index in range(5):
        step_label_set(state=state(owner, trajectory), step=step_at(trajectory, index), value=1)
    trajectory_submit(state=state(owner, trajectory))
    step_label_undo(state=state(owner, trajectory))
    labels = dict(StepLabel.objects.values_list("step__index", "status"))
    assert labels == {0: "submitted", 1: "submitted", 2: "submitted", 3: "submitted"}


def test_imported_labels_are_in_the_history(project: Project) -> None:
    imported = trajectory_with_steps(project, ["a", "b"])
    imported_label(step_at(imported, 0), -1)
    events = StepLabelEvent.objects.filter(step_id=step_at(imported, 0).pk)
    assert list(events.values_list("pgh_label", "value")) == [("insert", -1)]


def test_a_schema_with_labels_stays_but_its_project_can_go(
    owner: User, trajectory: Trajectory, schema: LabelSchema
) -> None:
    from django.db.models import RestrictedError

    step_label_set(state=state(owner, trajectory), step=step_at(trajectory, 0), value=1)
    with pytest.raises(RestrictedError):
        schema.delete()
    schema.project.delete()
    assert StepLabel.objects.count() == 0
    # The history keeps the record of the deleted label.
    assert list(StepLabelEvent.objects.values_list("pgh_label", flat=True)) == ["insert", "delete"]


def test_first_error_without_an_error_value_names_the_setting_that_allows_it(
    owner: User, trajectory: Trajectory, schema: LabelSchema
) -> None:
    schema.kind = LabelSchema.Kind.ORDINAL
    schema.values = [
        {"value": 1, "name": "weak", "key": "1"},
        {"value": 2, "name": "fine", "key": "2"},
    ]
    schema.save()
    with pytest.raises(LabelingError) as refused:
        step_label_set(
            state=state(owner, trajectory), step=step_at(trajectory, 1), first_error=True
        )
    assert refused.value.field == "first_error"
    assert "\u201cError value\u201d" in refused.value.message
    assert "label schema page" in refused.value.message
    assert not StepLabel.objects.exists()
