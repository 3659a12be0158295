"""Adding a scorer from the scoring page in a real browser: an admin registers a remote
LLM judge, sees it added and offered to the run form; a model path outside the model
directories is refused in its field. The form reads well on a desktop and a phone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.urls import reverse

from scoring.models import Scorer
from tests.browser import sign_in
from tests.factories import MembershipFactory, UserFactory
from tests.screens import UNLABELLED, WIDEST, shot
from trajectories.models import Membership
from trajectories.services import project_create

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize(("width", "height"), [(1440, 900), (390, 844)])
def test_an_admin_adds_a_judge_and_is_refused_a_path_outside(
    page: Any, live_server: Any, settings: Any, tmp_path: Path, width: int, height: int
) -> None:
    settings.STEPSCOPE_MODEL_DIRS = [tmp_path / "models"]
    project = project_create(slug="demo", name="Demo")
    admin = UserFactory.create(username="admin")
    MembershipFactory.create(user=admin, project=project, role=Membership.Role.ADMIN)
    page.set_viewport_size({"width": width, "height": height})
    sign_in(page, live_server, "admin", "pw-for-tests")
    page.goto(live_server.url + reverse("scoring-section", args=["demo"]))

    page.click("#scorer-add summary")
    page.select_option("#id_scorer_kind", "llm-judge")
    page.fill("#id_scorer_name", "qwen-judge")
    page.fill("#id_scorer_model_ref", "Qwen/Qwen2.5-7B-Instruct")
    page.fill("#id_scorer_queue", "default")
    page.select_option("#id_scorer_backend", "remote")
    page.fill("#id_scorer_base_url", "http://vllm:8000/v1")
    page.fill("#id_scorer_api_key_env", "JUDGE_API_KEY")
    assert page.evaluate(UNLABELLED) == []
    assert page.evaluate(WIDEST, width) == []
    shot(page, f"scorer-form-{width}")
    page.click(".scorer-form button[type=submit]")
    page.wait_for_selector("text=Scorer qwen-judge added")
    judge = Scorer.objects.get(name="qwen-judge")
    assert judge.parameters["base_url"] == "http://vllm:8000/v1" and judge.queue == "default"
    assert page.locator("#id_scorer option", has_text="qwen-judge").count() == 1

    page.click("#scorer-add summary")
    page.select_option("#id_scorer_kind", "token-classification")
    page.fill("#id_scorer_name", "escape")
    page.fill("#id_scorer_model_ref", f"{tmp_path}/models/../../etc")
    page.click(".scorer-form button[type=submit]")
    error = page.wait_for_selector(".scorer-field.has-error .error")
    assert "outside the model directories" in error.inner_text()
    assert page.evaluate(WIDEST, width) == []
    error.scroll_into_view_if_needed()
    shot(page, f"scorer-form-refused-{width}")
    assert not Scorer.objects.filter(name="escape").exists()
