"""The labeling pages and partials: labeling through HTMX posts, refusals shown in the
page, undo, submit, blind mode, queues, review, schema editing, long trajectories; outsiders
get 404 everywhere and CSRF is enforced."""

from __future__ import annotations

import time
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from labeling.models import FinalLabel, LabelSchema, Queue, StepLabel, TrajectoryLabel
from labeling.selectors import STEPS_PAGE_SIZE
from labeling.services import step_label_set, trajectory_submit
from tests.factories import MembershipFactory, ProjectFactory, trajectory_with_steps
from tests.labeling.conftest import leased_state, state, step_at
from trajectories.models import Membership, Project, Step, Trajectory

HTMX = {"HX-Request": "true"}


def post_label(client: Client, step_pk: int, **data: Any) -> Any:
    return client.post(reverse("step-label", args=[step_pk]), data, headers=HTMX)


def page(client: Client, trajectory: Trajectory, **params: Any) -> str:
    response = client.get(reverse("trajectory-detail", args=[trajectory.pk]), params)
    assert response.status_code == 200
    return str(response.content.decode())


# --- Labeling a step --------------------------------------------------------------------


def test_owner_labels_a_step_and_gets_back_the_row_and_progress(
    client: Client, owner: User, trajectory: Trajectory, schema: LabelSchema
) -> None:
    client.force_login(owner)
    step = step_at(trajectory, 1)
    html = page(client, trajectory)
    assert f'hx-post="{reverse("step-label", args=[step.pk])}"' in html
    assert "0</strong> / 5 steps labelled" in html

    response = post_label(client, step.pk, value="-1", schema=schema.pk, time_spent_ms="1200")
    assert response.status_code == 200
    html = response.content.decode()
    assert html.lstrip().startswith('<li class="step')
    assert f'id="step-{step.pk}"' in html
    assert 'data-value="-1"' in html
    assert 'id="label-progress" hx-swap-oob="true"' in html
    assert "1</strong> / 5 steps labelled" in html
    assert "<html" not in html
    assert '"stepscope:labelled"' in response["HX-Trigger-After-Settle"]
    label = StepLabel.objects.get()
    assert (label.value, label.status, label.time_spent_ms) == (-1, "draft", 1200)


def test_double_post_through_the_page_gives_one_label(
    client: Client, owner: User, trajectory: Trajectory, schema: LabelSchema
) -> None:
    client.force_login(owner)
    step = step_at(trajectory, 0)
    for _ in range(3):
        assert post_label(client, step.pk, value="1", schema=schema.pk).status_code == 200
    assert StepLabel.objects.filter(step=step).count() == 1


def test_plain_form_post_redirects_back_to_the_step(
    client: Client, owner: User, trajectory: Trajectory, schema: LabelSchema
) -> None:
    client.force_login(owner)
    step = step_at(trajectory, 2)
    response = client.post(reverse("step-label", args=[step.pk]), {"value": "0"})
    assert response.status_code == 302
    assert response["Location"].endswith(f"#step-{step.pk}")
    assert StepLabel.objects.get().value == 0


def test_editor_sets_tags_rationale_and_correction(
    client: Client, owner: User, trajectory: Trajectory, schema: LabelSchema
) -> None:
    client.force_login(owner)
    step = step_at(trajectory, 3)
    editor = client.get(reverse("step-label", args=[step.pk]), {"field": "rationale"}, headers=HTMX)
    html = editor.content.decode()
    assert "<html" not in html and "data-editor-form" in html
    assert 'name="rationale"' in html and "autofocus" in html
    response = post_label(
        client,
        step.pk,
        value="-1",
        tags=["logic error"],
        tags_sent="1",
        rationale="4 * 3 is 12, not 11",
        correction="Hence x = 3.",
    )
    assert response.status_code == 200
    assert "4 * 3 is 12, not 11" in response.content.decode()
    # Unticking every tag clears them; other fields stay.
    post_label(client, step.pk, tags_sent="1")
    label = StepLabel.objects.get()
    assert (label.tags, label.rationale, label.correction) == (
        [],
        "4 * 3 is 12, not 11",
        "Hence x = 3.",
    )
    assert client.get(reverse("step-label", args=[step.pk])).status_code == 200


@pytest.mark.parametrize(
    ("data", "status", "message"),
    [
        ({"value": "5"}, 400, "5 is not a value of step quality v1"),
        ({"value": "1", "tags": ["spelling"]}, 400, "Unknown tag: spelling."),
        ({"value": "1", "correction": "x"}, 400, "A correction goes with a step labelled"),
        ({"value": "banana"}, 400, "value: Enter a whole number."),
    ],
)
def test_bad_input_gets_a_message_in_the_page_and_changes_nothing(
    client: Client,
    owner: User,
    trajectory: Trajectory,
    data: dict[str, Any],
    status: int,
    message: str,
) -> None:
    client.force_login(owner)
    response = post_label(client, step_at(trajectory, 0).pk, **data)
    assert response.status_code == status
    assert response["HX-Retarget"] == "#flash"
    html = response.content.decode()
    assert html.startswith('<div class="flash" id="flash" role="alert"')
    assert message in html
    assert StepLabel.objects.count() == 0


def test_non_labelable_step_gets_400(client: Client, owner: User, trajectory: Trajectory) -> None:
    Step.objects.filter(trajectory=trajectory, index=4).update(labelable=False)
    client.force_login(owner)
    response = post_label(client, step_at(trajectory, 4).pk, value="1")
    assert response.status_code == 400
    assert "Step 4 is not labelable." in response.content.decode()
    row = page(client, trajectory).split(f'id="step-{step_at(trajectory, 4).pk}"')[1]
    assert 'class="label-form"' not in row.split("</li>")[0]


def test_stale_schema_gets_409(
    client: Client, owner: User, trajectory: Trajectory, schema: LabelSchema
) -> None:
    old = schema.pk
    LabelSchema.objects.filter(pk=old).update(is_active=False)
    LabelSchema.objects.create(project=schema.project, values=schema.values, version=2)
    client.force_login(owner)
    response = post_label(client, step_at(trajectory, 0).pk, value="1", schema=old)
    assert response.status_code == 409
    assert "Reload the page" in response.content.decode()
    assert StepLabel.objects.count() == 0


def test_schema_of_another_project_is_refused(
    client: Client, owner: User, trajectory: Trajectory
) -> None:
    other = LabelSchema.objects.create(
        project=ProjectFactory.create(), values=[{"value": 1, "name": "x"}]
    )
    client.force_login(owner)
    response = post_label(client, step_at(trajectory, 0).pk, value="1", schema=other.pk)
    assert response.status_code == 400
    assert "does not belong to this project" in response.content.decode()


def test_label_on_another_projects_step_is_404(client: Client, owner: User) -> None:
    elsewhere = trajectory_with_steps(ProjectFactory.create(), ["secret"])
    client.force_login(owner)
    assert post_label(client, step_at(elsewhere, 0).pk, value="1").status_code == 404
    assert StepLabel.objects.count() == 0


def test_annotator_needs_a_lease_to_label(
    client: Client, annotator: User, trajectory: Trajectory
) -> None:
    client.force_login(annotator)
    html = page(client, trajectory)
    assert 'class="label-form"' not in html and "take it from a" in html
    response = post_label(client, step_at(trajectory, 0).pk, value="1")
    assert response.status_code == 403
    assert "Take this trajectory from a queue" in response.content.decode()


# --- Undo, history, submit --------------------------------------------------------------


def test_undo_restores_the_previous_value_and_returns_that_row(
    client: Client, owner: User, trajectory: Trajectory
) -> None:
    client.force_login(owner)
    step = step_at(trajectory, 1)
    post_label(client, step.pk, value="1")
    post_label(client, step.pk, value="-1")
    response = client.post(reverse("label-undo", args=[trajectory.pk]), headers=HTMX)
    assert response.status_code == 200
    assert response["HX-Retarget"] == f"#step-{step.pk}"
    assert '"stepscope:undone"' in response["HX-Trigger-After-Settle"]
    assert StepLabel.objects.get().value == 1
    client.post(reverse("label-undo", args=[trajectory.pk]), headers=HTMX)
    assert StepLabel.objects.count() == 0
    nothing = client.post(reverse("label-undo", args=[trajectory.pk]), headers=HTMX)
    assert nothing.status_code == 409
    assert "Nothing to undo" in nothing.content.decode()

    history = client.get(reverse("step-history", args=[step.pk]), headers=HTMX).content.decode()
    assert history.count('class="history-entry') == 4
    assert history.count("history-undone") == 2


def test_submit_marks_labels_submitted(client: Client, owner: User, trajectory: Trajectory) -> None:
    client.force_login(owner)
    url = reverse("trajectory-submit", args=[trajectory.pk])
    post_label(client, step_at(trajectory, 0).pk, value="1")
    early = client.post(url, {"outcome": "correct"}, headers=HTMX)
    assert early.status_code == 400
    assert "4 steps still need a label" in early.content.decode()
    for index in range(1, 5):
        post_label(client, step_at(trajectory, index).pk, value="1")
    response = client.post(url, {"outcome": "correct", "comment": "clean"}, headers=HTMX)
    assert response.status_code == 200
    assert 'id="finish-status"' in response.content.decode()
    verdict = TrajectoryLabel.objects.get()
    assert (verdict.status, verdict.outcome, verdict.finish_reason) == (
        "submitted",
        "correct",
        "solution",
    )
    assert set(StepLabel.objects.values_list("status", flat=True)) == {"submitted"}


# --- Blind mode -------------------------------------------------------------------------


@pytest.fixture
def blind(project: Project) -> Project:
    project.settings = {"blind_labeling": True, "hide_model_scores": True}
    project.save()
    return project


def test_blind_mode_hides_other_labels_until_submit(
    client: Client,
    blind: Project,
    queue: Queue,
    annotator: User,
    annotator2: User,
    trajectory: Trajectory,
    researcher: User,
) -> None:
    step_label_set(state=leased_state(annotator, queue), step=step_at(trajectory, 0), value=-1)
    second = leased_state(annotator2, queue)
    assert second.blind and not second.show_model_scores

    client.force_login(annotator2)
    html = page(client, trajectory, queue=queue.pk)
    assert ">annotator</span>" not in html
    history = client.get(reverse("step-history", args=[step_at(trajectory, 0).pk])).content
    assert b">annotator<" not in history
    api = client.get(reverse("trajectory-labels", args=[trajectory.pk])).json()
    assert api == []

    for index in range(5):
        step_label_set(
            state=leased_state(annotator2, queue), step=step_at(trajectory, index), value=1
        )
    label = StepLabel.objects.get(annotator=annotator2, step__index=0)
    assert label.saw_model_scores is False
    trajectory_submit(state=state(annotator2, trajectory, queue))
    html = page(client, trajectory, queue=queue.pk)
    assert ">annotator</span>" in html
    assert len(client.get(reverse("trajectory-labels", args=[trajectory.pk])).json()) == 6

    # Reviewers always see everything.
    client.force_login(researcher)
    assert ">annotator</span>" in page(client, trajectory)


def test_without_blind_mode_annotators_see_each_other(
    client: Client, queue: Queue, annotator: User, annotator2: User, trajectory: Trajectory
) -> None:
    step_label_set(state=leased_state(annotator, queue), step=step_at(trajectory, 0), value=-1)
    leased_state(annotator2, queue)
    client.force_login(annotator2)
    assert ">annotator</span>" in page(client, trajectory, queue=queue.pk)
    label = StepLabel.objects.get()
    assert label.saw_model_scores is True


def test_the_automatic_finish_reason_follows_the_first_error(
    client: Client, owner: User, trajectory: Trajectory
) -> None:
    """The finish panel is not swapped with a step's row, so the row's response brings the
    automatic choice up to date out of band."""
    client.force_login(owner)
    assert "automatic (solution)" in page(client, trajectory)
    marked = post_label(client, step_at(trajectory, 2).pk, value="-1").content.decode()
    assert (
        '<option value="" id="finish-automatic" hx-swap-oob="true">automatic (found error)'
        in marked
    )
    assert "automatic (found error)" in page(client, trajectory)
    cleared = post_label(client, step_at(trajectory, 2).pk, value="1").content.decode()
    assert 'hx-swap-oob="true">automatic (solution)</option>' in cleared


# --- Queues -----------------------------------------------------------------------------


def test_a_queue_takes_every_list_filter_and_names_a_bad_one(
    client: Client, project: Project, owner: User, schema: LabelSchema
) -> None:
    labelled, bare = (trajectory_with_steps(project, ["a", "b"]) for _ in range(2))
    for step in labelled.steps.all():
        StepLabel.objects.create(step=step, annotator=owner, schema=schema, value=1)
    client.force_login(owner)
    page = reverse("queue-create", args=[project.slug])
    form = {"overlap": "1", "lease_minutes": "30"}
    client.post(page, {**form, "name": "Unlabelled", "label_status": "unlabelled"})
    queue = Queue.objects.get(name="Unlabelled")
    assert list(queue.items.values_list("trajectory_id", flat=True)) == [bare.pk]
    assert queue.selection == {"label_status": "unlabelled"}
    refused = client.post(page, {**form, "name": "Bad", "credit_run": "999999"})
    assert refused.status_code == 200
    assert "no attribution run 999999" in refused.content.decode()
    assert not Queue.objects.filter(name="Bad").exists()


def test_queue_flow_next_label_submit_next(
    client: Client, project: Project, owner: User, annotator: User, schema: LabelSchema
) -> None:
    trajectories = [trajectory_with_steps(project, ["a", "b"]) for _ in range(2)]
    client.force_login(owner)
    response = client.post(
        reverse("queue-create", args=[project.slug]),
        {"name": "Batch A", "overlap": "1", "lease_minutes": "30", "min_steps": "2"},
    )
    queue = Queue.objects.get(name="Batch A")
    assert response["Location"] == reverse("queue-detail", args=[queue.pk])
    assert queue.items.count() == 2

    client.force_login(annotator)
    listing = client.get(reverse("queue-list", args=[project.slug]), headers=HTMX).content.decode()
    assert "Batch A" in listing and "<html" not in listing
    home = client.get(reverse("project-home", args=[project.slug])).content.decode()
    assert f'hx-get="{reverse("queue-list", args=[project.slug])}"' in home

    first = client.post(reverse("queue-next", args=[queue.pk]))
    url = reverse("trajectory-detail", args=[trajectories[0].pk]) + f"?queue={queue.pk}"
    assert first["Location"] == url
    html = client.get(url).content.decode()
    assert "Batch A" in html and "lease:" in html and 'id="queue-next-form"' in html
    # "n" before submitting says so and stays.
    again = client.post(
        reverse("queue-next", args=[queue.pk]), {"from": trajectories[0].pk}, headers=HTMX
    )
    assert again.status_code == 409
    assert "Submit this trajectory first" in again.content.decode()
    for step in trajectories[0].steps.all():
        assert post_label(client, step.pk, value="1", queue=queue.pk).status_code == 200
    done = client.post(
        reverse("trajectory-submit", args=[trajectories[0].pk]), {"queue": queue.pk}, headers=HTMX
    )
    assert "queue: <strong>1</strong> / 2 items complete" in done.content.decode()
    second = client.post(
        reverse("queue-next", args=[queue.pk]), {"from": trajectories[0].pk}, headers=HTMX
    )
    assert second["HX-Redirect"].startswith(reverse("trajectory-detail", args=[trajectories[1].pk]))
    # Skip: the item is given back and never comes back to this annotator.
    client.post(reverse("queue-skip", args=[queue.pk]))
    last = client.post(reverse("queue-next", args=[queue.pk]))
    assert last["Location"] == reverse("queue-detail", args=[queue.pk])
    detail = client.get(last["Location"]).content.decode()
    assert "Nothing left for you" in detail


def label_and_submit(user: User, queue: Queue) -> None:
    current = leased_state(user, queue)
    for step in current.trajectory.steps.filter(labelable=True):
        step_label_set(state=current, step=step, value=1)
    trajectory_submit(state=state(user, current.trajectory, queue))


def test_a_finished_queue_says_so_instead_of_offering_to_start(
    client: Client, queue: Queue, annotator: User, annotator2: User, owner: User
) -> None:
    """The queue has one item and asks for two labellings of it."""
    detail, listing = (
        reverse("queue-detail", args=[queue.pk]),
        reverse("queue-list", args=[queue.project.slug]),
    )
    client.force_login(annotator)
    assert "Start labeling" in client.get(detail).content.decode()
    label_and_submit(annotator, queue)
    mine_done = client.get(detail).content.decode()
    assert "Start labeling" not in mine_done and "You have submitted all 1 item" in mine_done
    client.force_login(annotator2)
    assert "Start labeling" in client.get(listing, headers=HTMX).content.decode()
    label_and_submit(annotator2, queue)
    for user in (annotator, annotator2, owner):
        client.force_login(user)
        page = client.get(detail).content.decode()
        assert "Start labeling" not in page and 'id="queue-start"' not in page
        assert 'id="queue-finished"' in page and "This queue is finished" in page
        row = client.get(listing, headers=HTMX).content.decode()
        assert "Start labeling" not in row and "queue-finished" in row


def test_queue_assignees_limit_who_sees_it(
    client: Client,
    project: Project,
    owner: User,
    annotator: User,
    annotator2: User,
    trajectory: Trajectory,
) -> None:
    client.force_login(owner)
    client.post(
        reverse("queue-create", args=[project.slug]),
        {"name": "Only 2", "overlap": "1", "lease_minutes": "5", "assignees": [annotator2.pk]},
    )
    queue = Queue.objects.get()
    client.force_login(annotator)
    assert client.get(reverse("queue-detail", args=[queue.pk])).status_code == 404
    assert client.post(reverse("queue-next", args=[queue.pk])).status_code == 404
    listing = client.get(reverse("queue-list", args=[project.slug]), headers=HTMX)
    assert "Only 2" not in listing.content.decode()
    client.force_login(annotator2)
    assert client.get(reverse("queue-detail", args=[queue.pk])).status_code == 200


def test_annotators_cannot_create_or_close_queues(
    client: Client, project: Project, annotator: User, queue: Queue
) -> None:
    client.force_login(annotator)
    assert client.get(reverse("queue-create", args=[project.slug])).status_code == 403
    assert client.post(reverse("queue-active", args=[queue.pk]), {"active": "0"}).status_code == 403


def test_closed_queue_hands_out_nothing(
    client: Client, owner: User, annotator: User, queue: Queue
) -> None:
    client.force_login(owner)
    client.post(reverse("queue-active", args=[queue.pk]), {"active": "0"})
    client.force_login(annotator)
    response = client.post(reverse("queue-next", args=[queue.pk]), headers=HTMX)
    assert response.status_code == 400
    assert "This queue is closed." in response.content.decode()


# --- Review -----------------------------------------------------------------------------


def test_reviewer_sees_disagreements_and_sets_final_labels(
    client: Client,
    queue: Queue,
    annotator: User,
    annotator2: User,
    researcher: User,
    trajectory: Trajectory,
    schema: LabelSchema,
) -> None:
    for user, values in [(annotator, [1, 1, -1, 1, 1]), (annotator2, [1, 0, -1, 1, 1])]:
        for index, value in enumerate(values):
            step_label_set(
                state=leased_state(user, queue), step=step_at(trajectory, index), value=value
            )
        trajectory_submit(state=state(user, trajectory, queue))
    client.force_login(researcher)
    listing = client.get(reverse("review-list", args=[trajectory.project.slug])).content.decode()
    assert f'id="review-candidate-{trajectory.pk}" class="has-disagreement"' in listing

    html = client.get(reverse("review-trajectory", args=[trajectory.pk])).content.decode()
    disagreeing = step_at(trajectory, 1)
    assert f'class="review-row has-disagreement" id="review-{disagreeing.pk}"' in html
    assert html.count("has-disagreement") == 1

    response = client.post(
        reverse("final-label", args=[disagreeing.pk]),
        {"value": "0", "schema": schema.pk},
        headers=HTMX,
    )
    assert response.status_code == 200
    assert response.content.decode().lstrip().startswith('<tr class="review-row has-disagreement"')
    final = FinalLabel.objects.get()
    assert (final.step_id, final.value, final.adjudicator_id) == (disagreeing.pk, 0, researcher.pk)
    # The final label is its own source: annotators' labels are untouched.
    assert StepLabel.objects.filter(step=disagreeing).count() == 2
    assert "step-label-final" in page(client, trajectory)
    client.post(reverse("final-label", args=[disagreeing.pk]), {"value": ""}, headers=HTMX)
    assert FinalLabel.objects.count() == 0


def test_annotators_cannot_review(client: Client, annotator: User, trajectory: Trajectory) -> None:
    client.force_login(annotator)
    assert client.get(reverse("review-list", args=[trajectory.project.slug])).status_code == 403
    assert client.get(reverse("review-trajectory", args=[trajectory.pk])).status_code == 403
    response = client.post(reverse("final-label", args=[step_at(trajectory, 0).pk]), {"value": "1"})
    assert response.status_code == 403


# --- Schema -----------------------------------------------------------------------------


def schema_post(schema: LabelSchema, **changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "form": "schema",
        "kind": schema.kind,
        "error_tags": "\n".join(schema.error_tags),
        "values-TOTAL_FORMS": len(schema.values),
        "values-INITIAL_FORMS": len(schema.values),
    }
    for i, entry in enumerate(schema.values):
        for key in ("value", "name", "key", "color"):
            data[f"values-{i}-{key}"] = entry[key]
    data.update(changes)
    return data


def test_admin_edits_the_schema_into_a_new_version(
    client: Client, owner: User, researcher: User, schema: LabelSchema
) -> None:
    url = reverse("schema-edit", args=[schema.project.slug])
    client.force_login(researcher)
    assert client.get(url).status_code == 200
    assert client.post(url, schema_post(schema)).status_code == 403

    client.force_login(owner)
    response = client.post(url, schema_post(schema, **{"values-2-name": "correct"}))
    assert response.status_code == 302
    active = LabelSchema.objects.get(is_active=True)
    assert active.version == 2
    assert (active.entry_for(1) or {}).get("name") == "correct"
    refused = client.post(url, schema_post(active, **{"values-0-key": "j"}))
    assert "is a labeling shortcut" in refused.content.decode()
    bad = client.post(url, schema_post(active, **{"values-0-value": "5"}))
    assert "A ternary schema has the values -1, 0 and 1." in bad.content.decode()

    client.post(url, {"form": "guidelines", "guidelines": "# Rules\n<script>x</script>"})
    guidelines = client.get(reverse("guidelines", args=[schema.project.slug])).content.decode()
    assert "<h1>Rules</h1>" in guidelines and "<script>x" not in guidelines
    client.post(url, {"form": "settings", "blind_labeling": "on", "labels_per_step": "3"})
    schema.project.refresh_from_db()
    assert schema.project.settings["blind_labeling"] is True
    assert schema.project.settings["labels_per_step"] == 3


# --- Access and CSRF --------------------------------------------------------------------


def new_urls(trajectory: Trajectory, queue: Queue) -> tuple[list[str], list[str]]:
    step = step_at(trajectory, 0)
    slug = trajectory.project.slug
    gets = [
        reverse("step-label", args=[step.pk]),
        reverse("step-history", args=[step.pk]),
        reverse("trajectory-steps", args=[trajectory.pk]),
        reverse("guidelines", args=[slug]),
        reverse("queue-list", args=[slug]),
        reverse("queue-create", args=[slug]),
        reverse("queue-detail", args=[queue.pk]),
        reverse("review-list", args=[slug]),
        reverse("review-trajectory", args=[trajectory.pk]),
        reverse("schema-edit", args=[slug]),
        reverse("trajectory-labels", args=[trajectory.pk]),
        reverse("label-detail", args=[StepLabel.objects.get().pk]),
    ]
    posts = [
        reverse("step-label", args=[step.pk]),
        reverse("label-undo", args=[trajectory.pk]),
        reverse("trajectory-submit", args=[trajectory.pk]),
        reverse("queue-create", args=[slug]),
        reverse("queue-next", args=[queue.pk]),
        reverse("queue-skip", args=[queue.pk]),
        reverse("queue-active", args=[queue.pk]),
        reverse("final-label", args=[step.pk]),
        reverse("schema-edit", args=[slug]),
    ]
    return gets, posts


def test_outsider_gets_404_for_every_labeling_page_partial_and_endpoint(
    client: Client, owner: User, outsider: User, trajectory: Trajectory, queue: Queue
) -> None:
    step_label_set(state=state(owner, trajectory), step=step_at(trajectory, 0), value=1)
    gets, posts = new_urls(trajectory, queue)
    client.force_login(outsider)
    for url in gets:
        assert client.get(url).status_code == 404, url
        assert client.get(url, headers=HTMX).status_code == 404, url
    for url in posts:
        assert client.post(url, {"value": "1"}).status_code == 404, url
        assert client.post(url, {"value": "1"}, headers=HTMX).status_code == 404, url
    api = client.post(
        reverse("label-list"),
        {"step": step_at(trajectory, 0).pk, "value": 1},
        content_type="application/json",
    )
    assert api.status_code == 404
    assert client.get(reverse("label-list")).json()["results"] == []
    assert StepLabel.objects.count() == 1


def test_member_of_another_project_gets_404(
    client: Client, owner: User, trajectory: Trajectory, queue: Queue
) -> None:
    step_label_set(state=state(owner, trajectory), step=step_at(trajectory, 0), value=1)
    elsewhere = MembershipFactory.create(project=ProjectFactory(), role=Membership.Role.ADMIN).user
    gets, _ = new_urls(trajectory, queue)
    client.force_login(elsewhere)
    for url in gets:
        assert client.get(url).status_code == 404, url


def test_anonymous_is_sent_to_login(
    client: Client, owner: User, trajectory: Trajectory, queue: Queue
) -> None:
    step_label_set(state=state(owner, trajectory), step=step_at(trajectory, 0), value=1)
    gets, posts = new_urls(trajectory, queue)
    for url in gets:
        if url.startswith("/api/"):
            assert client.get(url).status_code in (401, 403), url
        else:
            assert client.get(url).status_code == 302, url
    for url in posts:
        assert client.post(url).status_code == 302, url


def test_posts_without_csrf_token_are_refused(
    owner: User, trajectory: Trajectory, queue: Queue
) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(owner)
    step = step_at(trajectory, 0)
    urls = [
        reverse("step-label", args=[step.pk]),
        reverse("label-undo", args=[trajectory.pk]),
        reverse("trajectory-submit", args=[trajectory.pk]),
        reverse("queue-next", args=[queue.pk]),
        reverse("final-label", args=[step.pk]),
        reverse("schema-edit", args=[trajectory.project.slug]),
    ]
    for url in urls:
        assert client.post(url, {"value": "1"}, headers=HTMX).status_code == 403, url
    api = client.post(
        reverse("label-list"), {"step": step.pk, "value": 1}, content_type="application/json"
    )
    assert api.status_code == 403
    assert StepLabel.objects.count() == 0
    # With the token the page carries on <body hx-headers>, the same post goes through.
    html = client.get(reverse("trajectory-detail", args=[trajectory.pk])).content.decode()
    token = html.split('"X-CSRFToken": "')[1].split('"')[0]
    response = client.post(
        reverse("step-label", args=[step.pk]),
        {"value": "1"},
        headers={**HTMX, "X-CSRFToken": token},
    )
    assert response.status_code == 200


# --- Long trajectories ------------------------------------------------------------------


def test_long_trajectory_loads_its_steps_in_pages(
    client: Client, project: Project, owner: User
) -> None:
    trajectory = trajectory_with_steps(project, [f"step {n}" for n in range(STEPS_PAGE_SIZE + 30)])
    client.force_login(owner)
    html = page(client, trajectory)
    assert html.count('class="step ') == STEPS_PAGE_SIZE
    more = reverse("trajectory-steps", args=[trajectory.pk]) + f"?start={STEPS_PAGE_SIZE}"
    assert f'hx-get="{more}"' in html and 'hx-trigger="revealed, stepscope:more"' in html
    rest = client.get(more, headers=HTMX).content.decode()
    assert rest.count('class="step ') == 30
    assert "steps-more" not in rest and "<html" not in rest
    assert f'data-index="{STEPS_PAGE_SIZE + 29}"' in rest


def test_thousand_step_page_renders_in_constant_queries(
    client: Client, project: Project, owner: User, annotator: User
) -> None:
    """The trajectory page's query count does not depend on the number of steps or labels.
    Prints the render time of a 1,000-step trajectory's first page and of all its pages."""
    short = trajectory_with_steps(project, ["a", "b"])
    long = trajectory_with_steps(
        project, [f"Step {n}: " + "some reasoning " * 20 for n in range(1000)]
    )
    schema = LabelSchema.objects.get(project=project)
    StepLabel.objects.bulk_create(
        StepLabel(step=step, annotator=user, schema=schema, value=step.index % 3 - 1)
        for step in Step.objects.filter(trajectory__in=[short, long])
        for user in (owner, annotator)
    )
    client.force_login(owner)
    counts = []
    for trajectory in (short, long):
        with CaptureQueriesContext(connection) as queries:
            page(client, trajectory)
        counts.append(len(queries))
    assert counts[0] == counts[1] <= 5

    start = time.perf_counter()
    html = page(client, long)
    first_page = time.perf_counter() - start
    pages = 1
    start = time.perf_counter()
    next_start: int | None = STEPS_PAGE_SIZE
    while next_start is not None:
        with CaptureQueriesContext(connection) as queries:
            html = client.get(
                reverse("trajectory-steps", args=[long.pk]), {"start": next_start}, headers=HTMX
            ).content.decode()
        assert len(queries) == counts[1]
        pages += 1
        next_start = (
            int(html.split("start=")[1].split('"')[0].split("&")[0])
            if "steps-more" in html
            else None
        )
    rest = time.perf_counter() - start
    print(
        f"\n1,000-step trajectory: first page ({STEPS_PAGE_SIZE} steps) {first_page * 1000:.0f} ms,"
        f" all {pages} pages {(first_page + rest) * 1000:.0f} ms, {counts[1]} queries per page"
    )


def test_go_to_step_without_javascript_redirects_to_its_page(
    client: Client, owner: User, project: Project
) -> None:
    long = trajectory_with_steps(project, [f"step {i}" for i in range(STEPS_PAGE_SIZE + 30)])
    client.force_login(owner)
    html = page(client, long)
    assert 'id="step-goto"' in html and 'name="step"' in html
    url = reverse("trajectory-steps", args=[long.pk])
    target = Step.objects.get(trajectory=long, index=STEPS_PAGE_SIZE + 7)
    response = client.get(url, {"step": target.index})
    assert response["Location"] == f"{url}?start={STEPS_PAGE_SIZE}#step-{target.pk}"
    landed = client.get(response["Location"]).content.decode()
    assert f'id="step-{target.pk}"' in landed and 'id="steps-before"' in landed
    assert f'id="step-{Step.objects.get(trajectory=long, index=0).pk}"' not in landed
    # With HTMX: the page in place of the steps shown, scrolled to the step.
    swapped = client.get(url, {"step": target.index}, headers=HTMX)
    assert swapped["HX-Reswap"] == f"innerHTML show:#step-{target.pk}:top"
    assert f'id="step-{target.pk}"' in swapped.content.decode()
    # A short trajectory, one page long, needs no such control.
    short = trajectory_with_steps(project, ["only"])
    assert 'id="step-goto"' not in page(client, short)
