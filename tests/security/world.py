"""One project with an object behind every URL parameter, and the people who matter for
access: a user of each role, an outsider and nobody (anonymous). The security tests walk
the URL resolver and fill each route's parameters from this world, so a new URL is
exercised (and has to be listed) without anyone writing a fixture for it.

``text`` goes into every free-text field a user or a file controls (task, steps, tool
calls and outputs, metadata, rationales, corrections, guidelines, names, error
messages), so the XSS tests build the same world with payloads in it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.contrib.auth.models import User
from django.core.cache import cache
from django.db import transaction
from django.test import Client
from django.test.client import MULTIPART_CONTENT
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils import timezone
from rest_framework.authtoken.models import Token

from accounts.services import api_token_create
from automation.models import Rule, RuleFiring, Webhook, WebhookDelivery
from discovery.models import (
    FailureMode,
    FailureModeMember,
    FailureModeRun,
    NoteGroup,
    NoteRun,
    Question,
    QuestionAnswer,
)
from exports.models import BatchVersion, BatchVersionRow, ExportBatch, ExportJob, Selection
from labeling.models import (
    FinalSpan,
    LabelSchema,
    Queue,
    SpanLabel,
    SpanSchema,
    StepLabel,
    TrajectoryLabel,
)
from labeling.services import queue_create
from rollouts.models import Policy, RolloutJob
from scoring import prm
from scoring.models import (
    AttributionRun,
    JudgePrompt,
    JudgeReply,
    Scorer,
    ScoringRun,
    StepCredit,
    StepScore,
)
from tests.factories import MembershipFactory, TrajectoryFactory, UserFactory
from trajectories.formats.base import ParsedStep
from trajectories.hashing import prefix_hashes
from trajectories.models import (
    FollowSource,
    ImportBatch,
    Membership,
    MembershipInvite,
    Project,
    ProjectDeletion,
    Step,
    Trajectory,
)
from trajectories.selection import TrajectoryFilters
from trajectories.services import invite_create, project_create

ROLES = ("anonymous", "outsider", "annotator", "researcher", "admin")


@dataclass
class World:
    project: Project
    users: dict[str, User]
    # The second annotator, whose labels blind mode hides from ``users["annotator"]``.
    other_annotator: User
    trajectory: Trajectory
    other_trajectory: Trajectory
    step: Step
    queue: Queue
    import_batch: ImportBatch
    export_job: ExportJob
    selection: Selection
    scorer: Scorer
    scoring_run: ScoringRun
    # An LLM judge with one prompt version and a reply (its critique is free text).
    judge: Scorer
    attribution_run: AttributionRun
    policy: Policy
    rollout_job: RolloutJob
    label: StepLabel
    # A member the admin may change or remove (the second annotator's membership).
    membership: Membership
    # An open invite link (annotator role) made by the admin, and its secret.
    invite: MembershipInvite
    invite_secret: str
    export_file: str
    # The start of the admin's API token (``accounts.ApiToken.token_key``).
    api_token_key: str
    # A project deletion the admin started (of another project, already gone).
    deletion: ProjectDeletion
    # A folder the project follows in the app.
    follow_source: FollowSource
    # A versioned batch whose version 1 is the world's export.
    batch: ExportBatch
    # A rule (filling the world's queue) that fired on the trajectory, and a webhook with
    # one delivery.
    rule: Rule
    webhook: Webhook
    delivery: WebhookDelivery
    # The admin's span on the trajectory, under a span schema whose value holds the text.
    span: SpanLabel
    # The admin's final span over the same steps (adjudicated).
    final_span: FinalSpan
    # A finished failure-mode run with one mode (its name and description hold the text).
    failure_mode_run: FailureModeRun
    failure_mode: FailureMode
    # A finished note run with one group (its name and words hold the text).
    note_run: NoteRun
    note_group: NoteGroup
    # A question the judge answered: its text, criterion, a refused name and the answer's
    # reason hold the text.
    question: Question

    def token(self, role: str) -> str:
        return Token.objects.get_or_create(user=self.users[role])[0].key

    def parameters(self, route: str) -> dict[str, Any]:
        """Values for a route's parameters, by the route's path: ``steps/<pk>`` gets a
        step's id, ``p/<slug>`` the project's slug, and so on."""
        values: dict[str, Any] = {}
        if "slug" in _names(route):
            values["slug"] = self.project.slug
        if "name" in _names(route):
            values["name"] = self.batch.name if "batches/" in route else self.export_file
        if "number" in _names(route):
            values["number"] = 1
        if "format" in _names(route):
            values["format"] = "json"
        if "pk" in _names(route):
            values["pk"] = self._pk_for(route)
        if "key" in _names(route):
            values["key"] = self.api_token_key
        if "secret" in _names(route):
            values["secret"] = self.invite_secret
        if "field" in _names(route):
            values["field"] = "task"
        return values

    def _pk_for(self, route: str) -> Any:
        plain = route.replace("^", "").replace("api/v1/", "")
        by_prefix: list[tuple[str, Any]] = [
            ("steps", self.step.pk),
            ("t/", self.trajectory.pk),
            ("trajectories", self.trajectory.pk),
            ("q/", self.queue.pk),
            ("queues", self.queue.pk),
            ("imports", self.import_batch.pk),
            ("exports", self.export_job.pk),
            ("selections", self.selection.pk),
            ("scoring-runs", self.scoring_run.pk),
            ("attribution-runs", self.attribution_run.pk),
            ("rollout-jobs", self.rollout_job.pk),
            ("rollouts", self.rollout_job.pk),
            ("p/<slug:slug>/judges/", self.judge.pk),
            ("scorers/<int:pk>/alignment/", self.judge.pk),
            ("scorers", self.scorer.pk),
            ("policies", self.policy.pk),
            ("labels", self.label.pk),
            ("projects/<slug:slug>/members/", self.membership.pk),
            ("projects/<slug:slug>/invites/", self.invite.pk),
            ("projects/<slug:slug>/follow-sources/", self.follow_source.pk),
            ("p/<slug:slug>/rules/", self.rule.pk),
            ("p/<slug:slug>/webhooks/", self.webhook.pk),
            ("p/<slug:slug>/webhook-deliveries/", self.delivery.pk),
            ("rules", self.rule.pk),
            ("webhooks", self.webhook.pk),
            ("webhook-deliveries", self.delivery.pk),
            ("projects", self.project.slug),
            ("deletions", self.deletion.pk),
            ("spans", self.span.pk),
            ("final-spans", self.final_span.pk),
            ("failure-modes", self.failure_mode.pk),
            ("failure-mode-runs", self.failure_mode_run.pk),
            ("note-groups", self.note_group.pk),
            ("note-runs", self.note_run.pk),
            ("questions", self.question.pk),
            ("p/<slug:slug>/follow/", self.follow_source.pk),
            ("project-deletions", self.deletion.pk),
            ("p/<slug:slug>/members/invites/", self.invite.pk),
            ("p/<slug:slug>/members/", self.membership.pk),
        ]
        for prefix, pk in by_prefix:
            if plain.startswith(prefix):
                return pk
        raise AssertionError(f"no object for the parameter of {route!r}; add one to World")


class Visitors:
    """A client per role, signed in once (pages by session, the API by token). Each
    request's writes are rolled back, so every role meets the same world."""

    def __init__(self, world: World, *, enforce_csrf_checks: bool = False) -> None:
        self.world = world
        self.clients: dict[str, Client] = {}
        self.tokens: dict[str, str] = {}
        for role in ROLES:
            client = Client(enforce_csrf_checks=enforce_csrf_checks, raise_request_exception=False)
            if role != "anonymous":
                client.force_login(world.users[role])
                self.tokens[role] = world.token(role)
            self.clients[role] = client

    def request(
        self,
        route: Route,
        role: str,
        method: str,
        *,
        htmx: bool = False,
        session_api: bool = False,
        data: dict[str, Any] | None = None,
        form: bytes | None = None,
        form_type: str = MULTIPART_CONTENT,
        headers: dict[str, str] | None = None,
        query: str = "",
    ) -> Any:
        """``method`` on ``route`` as ``role``; the API with the role's token unless
        ``session_api`` (then like the pages, by the session cookie). ``data`` is encoded
        as a form for the request; ``form`` is one already encoded as ``form_type`` (by
        default ``encode_multipart`` with the test client's ``BOUNDARY``), to send one
        body to many routes."""
        client = self.clients[role]
        extra: dict[str, Any] = dict(headers or {})
        if htmx:
            extra["HTTP_HX_REQUEST"] = "true"
        if role != "anonymous" and route.is_api and not session_api:
            extra["HTTP_AUTHORIZATION"] = f"Token {self.tokens[role]}"
        # The API's throttle counts calls in the cache; these tests make many.
        cache.clear()
        path = route.path(self.world) + (query or route_query(route, self.world))
        cookies = SimpleCookie(client.cookies)
        with transaction.atomic():
            if form is not None:
                response = client.generic(method, path, form, form_type, **extra)
            elif data is None:
                response = client.generic(method, path, **extra)
            else:
                response = getattr(client, method.lower())(path, data, **extra)
            transaction.set_rollback(True)
        # A logout (rolled back in the database) must not sign the client out either.
        session = client.cookies.get(settings.SESSION_COOKIE_NAME)
        if role != "anonymous" and (session is None or not session.value):
            client.cookies = cookies
        return response


def body(response: Any) -> str:
    if getattr(response, "streaming", False):
        return b"".join(response.streaming_content).decode(errors="replace")
    return str(response.content.decode(errors="replace"))


def _judge(project: Project, step: Step, text: str, admin: User) -> Scorer:
    """An LLM judge of the project whose one run said the world's step is right (the
    annotator's label says wrong: a disagreement, listed with both texts), with
    ``text`` in its prompt note and its critique."""
    judge = Scorer.objects.create(
        project=project,
        name="world-judge",
        kind=prm.LLM_JUDGE,
        model_ref="tiny",
        parameters={"mode": "per-step"},
    )
    prompt = JudgePrompt.objects.create(
        scorer=judge, version=1, template="Judge {step}", note=f"note {text}"[:200]
    )
    run = ScoringRun.objects.create(
        project=project,
        scorer=judge,
        prompt=prompt,
        status=ScoringRun.Status.DONE,
        created_by=admin,
    )
    JudgeReply.objects.create(
        run=run,
        scorer=judge,
        prompt=prompt,
        key=f"s{step.pk}",
        trajectory_id=step.trajectory_id,
        step=step,
        text=f"reply {text}",
        critique=f"critique {text}",
        verdict=1,
        value=1.0,
    )
    return judge


def route_query(route: Route, world: World) -> str:
    """Query strings some endpoints need before they look at the project."""
    if route.key == "api:api-compare":
        return "?" + urlencode({"project": world.project.slug, "scorer": world.scorer.name})
    if route.key == "api:api-compare-decisive":
        return "?" + urlencode(
            {
                "project": world.project.slug,
                "reference": "human:nobody",
                "candidate": f"model:{world.scorer.name}",
            }
        )
    if route.key.startswith("api:api-batch-"):
        return "?" + urlencode({"project": world.project.slug})
    if route.key == "task-tree":
        return "?" + urlencode({"task": world.trajectory.task_key})
    return ""


def _names(route: str) -> set[str]:
    names = set()
    for converter_name, regex_name in re.findall(r"<(?:\w+:)?(\w+)>|\(\?P<(\w+)>", route):
        names.add(converter_name or regex_name)
    return names


@dataclass(frozen=True)
class Route:
    """One URL pattern of the project: its name (``api:`` in front for the REST API, whose
    names would otherwise clash with the pages'), its route text and its view."""

    key: str
    route: str
    pattern: URLPattern

    @property
    def is_api(self) -> bool:
        return self.route.startswith(("api/v1/", "v1/traces"))

    def path(self, world: World) -> str:
        """The route with its parameters filled in from ``world``."""
        path = self.route
        values = world.parameters(path)
        path = re.sub(r"\^|\$", "", path)
        path = re.sub(r"\\\.\(\?P<format>\[a-z0-9\]\+\)/\?", ".json", path)
        path = re.sub(r"<drf_format_suffix:format>", ".json", path)
        path = re.sub(r"\\\.", ".", path)

        def fill(match: re.Match[str]) -> str:
            return str(values[match.group(1) or match.group(2)])

        path = re.sub(r"<(?:\w+:)?(\w+)>|\(\?P<(\w+)>[^)]*\)", fill, path)
        return "/" + path


def project_routes() -> Iterator[Route]:
    """Every URL pattern of the project, Django's own admin site aside (staff only, tested
    by Django). Format-suffix variants of an API route share its key."""

    def walk(patterns: list[Any], prefix: str) -> Iterator[tuple[str, URLPattern]]:
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                if pattern.namespace == "admin":
                    continue
                yield from walk(pattern.url_patterns, prefix + str(pattern.pattern))
            else:
                yield prefix + str(pattern.pattern), pattern

    seen: set[str] = set()
    for route, pattern in walk(get_resolver().url_patterns, ""):
        key = ("api:" if route.startswith("api/v1/") else "") + str(pattern.name)
        if route in seen:
            continue
        seen.add(route)
        yield Route(key=key, route=route, pattern=pattern)


def _steps(trajectory: Trajectory, contents: list[str], text: str) -> list[Step]:
    parsed = [
        ParsedStep(kind="thought", role="assistant", content=c, labelable=True) for c in contents
    ]
    # A tool call with arguments and its output, both carrying ``text``.
    parsed[1] = ParsedStep(
        kind="tool_call",
        role="assistant",
        content=contents[1],
        labelable=True,
        tool_name=f"search{text}",
        tool_args={"query": text, "nested": {"html": text}},
    )
    parsed[2] = ParsedStep(
        kind="tool_result", role="tool", content=f"tool output: {text}", labelable=True
    )
    hashes = prefix_hashes(trajectory.task, parsed)
    return Step.objects.bulk_create(
        Step(
            trajectory=trajectory,
            index=i,
            kind=s.kind,
            role=s.role,
            content=s.content,
            labelable=s.labelable,
            tool_name=s.tool_name or "",
            tool_args=s.tool_args,
            prefix_hash=h,
            metadata={"note": text},
        )
        for i, (s, h) in enumerate(zip(parsed, hashes, strict=True))
    )


def build_world(
    tmp_path: Path, *, text: str = "plain text", blind: bool = False, slug: str = "demo"
) -> World:
    """The world, with ``text`` in every free-text field; ``blind`` turns on blind
    labeling (and hides model scores from annotators until they submit)."""
    project = project_create(slug=slug, name=f"Demo {text}", guidelines=f"# Rules\n\n{text}")
    if blind:
        project.settings = {**project.settings, "blind_labeling": True}
        project.save(update_fields=["settings"])
    users = {}
    for role in ("annotator", "researcher", "admin"):
        user = UserFactory.create(username=role)
        MembershipFactory.create(user=user, project=project, role=role)
        users[role] = user
    users["outsider"] = UserFactory.create(username="outsider")
    other = UserFactory.create(username="annotator2")
    other_membership = MembershipFactory.create(
        user=other, project=project, role=Membership.Role.ANNOTATOR
    )

    schema = LabelSchema.objects.get(project=project, is_active=True)
    schema.error_tags = ["calculation error", f"tag {text}"]
    schema.save(update_fields=["error_tags"])
    batch = ImportBatch.objects.create(
        project=project,
        file_name=f"upload{text}.jsonl",
        source_format="stepscope",
        status=ImportBatch.Status.DONE,
        rejected_count=1,
        errors=[{"location": f"line 3 {text}", "field": f"steps.0.{text}", "message": text}],
        created_by=users["admin"],
        finished_at=timezone.now(),
    )
    trajectories = []
    for n, success in enumerate((False, True)):
        trajectory = TrajectoryFactory.create(
            project=project,
            external_id=f"rollout-{n}{text}",
            task_key=f"task{text}",
            task=f"Solve this: {text}",
            ground_truth=f"4 {text}",
            model_name=f"model{text}",
            success=success,
            outcome_reward=1.0 if success else 0.0,
            metadata={"source": text, "nested": [text]},
            step_count=5,
            import_batch=batch,
        )
        contents = [
            f"Let x be the number of apples. {text}",
            f"Call the calculator {text}",
            "tool output",
            f"Hence x = {4 + n}. {text}",
            f"The answer is {4 + n}. [link](javascript:alert(1)) {text}",
        ]
        _steps(trajectory, contents, text)
        trajectories.append(trajectory)
    trajectory, other_trajectory = trajectories
    step = Step.objects.get(trajectory=trajectory, index=0)

    queue = queue_create(
        project=project,
        name=f"Round{text}",
        description=text,
        created_by=users["admin"],
        filters=TrajectoryFilters(),
        overlap=2,
    )
    label = StepLabel.objects.create(
        step=step,
        annotator=other,
        schema=schema,
        value=-1,
        tags=[f"tag {text}"],
        rationale=f"rationale {text}",
        correction=f"correction {text}",
    )
    TrajectoryLabel.objects.create(
        trajectory=trajectory,
        annotator=other,
        status=TrajectoryLabel.Status.SUBMITTED,
        submitted_at=timezone.now(),
        comment=f"comment {text}",
    )
    out_dir = tmp_path / "export"
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "train.jsonl").write_text("{}\n")
    (out_dir / "manifest.json").write_text("{}")
    export_job = ExportJob.objects.create(
        project=project,
        format="prm-stepwise",
        container="jsonl",
        label_source="human:majority",
        neutral="skip",
        selection_name=f"sel{text}",
        status=ExportJob.Status.DONE,
        out_dir=str(out_dir),
        files=[{"name": "train.jsonl", "sha256": "0" * 64, "rows": 1, "bytes": 3}],
        error=f"export error {text}",
        created_by=users["admin"],
    )
    selection = Selection.objects.create(
        project=project, name="failures", definition={"success": "false"}, created_by=users["admin"]
    )
    scorer = Scorer.objects.create(
        project=project, name=f"prm{text}", kind=prm.TOKEN_CLASSIFICATION, queue="gpu"
    )
    scoring_run = ScoringRun.objects.create(
        project=project,
        scorer=scorer,
        status=ScoringRun.Status.FAILED,
        error=f"scoring error {text}",
        created_by=users["admin"],
    )
    for s in Step.objects.filter(trajectory__project=project):
        StepScore.objects.create(step=s, scorer=scorer, run=scoring_run, value=0.25 + 0.1 * s.index)
    attribution_run = AttributionRun.objects.create(
        project=project,
        method=AttributionRun.Method.PRM_DELTA,
        scorer=scorer,
        key="k" * 64,
        status=AttributionRun.Status.DONE,
        error=f"attribution error {text}",
        created_by=users["admin"],
    )
    StepCredit.objects.create(step=step, run=attribution_run, value=0.5, level=0.25)
    judge = _judge(project, step, text, users["admin"])
    policy = Policy.objects.create(project=project, name=f"policy{text}", model_ref="tiny")
    rollout_job = RolloutJob.objects.create(
        project=project,
        policy=policy,
        k=2,
        answer_check="numeric",
        selection={"step_ids": [step.pk]},
        status=RolloutJob.Status.FAILED,
        error=f"rollout error {text}",
        created_by=users["admin"],
    )
    api_token, _ = api_token_create(user=users["admin"], name=f"token {text}")
    webhook = Webhook.objects.create(
        project=project,
        name=f"hook{text}",
        url=f"https://hooks.example.com/{slug}",
        events=["rule.fired"],
        secret="whsec_" + "A" * 44,
    )
    rule = Rule.objects.create(
        project=project,
        name=f"rule{text}",
        selection={"q": text},
        action=Rule.Action.QUEUE,
        queue=queue,
        created_by=users["admin"],
        last_error=f"rule error {text}",
    )
    RuleFiring.objects.create(
        rule=rule, trajectory=trajectory, trigger="arrival", source="push", result={"x": text}
    )
    delivery = WebhookDelivery.objects.create(
        webhook=webhook,
        message_id=f"msg_{slug}",
        kind="rule.fired",
        payload={"data": text},
        status=WebhookDelivery.Status.FAILED,
        attempts=1,
        next_attempt_at=timezone.now(),
        log=[{"code": 500, "error": text}],
    )
    invite, invite_secret = invite_create(project=project, actor=users["admin"], role="annotator")
    failure_mode_run = FailureModeRun.objects.create(
        project=project,
        label_source="human:majority",
        status=FailureModeRun.Status.DONE,
        error=f"modes error {text}",
        total=1,
        done=1,
        chosen=1,
        k=1,
        created_by=users["admin"],
    )
    failure_mode = FailureMode.objects.create(
        run=failure_mode_run,
        number=1,
        name=f"mode {text}",
        words=[text],
        description=f"described {text}",
        size=1,
        share=1.0,
        examples=[step.pk],
    )
    FailureModeMember.objects.create(mode=failure_mode, trajectory=trajectory, step=step)
    note_run = NoteRun.objects.create(
        project=project,
        status=NoteRun.Status.DONE,
        error=f"notes error {text}",
        total=1,
        done=1,
        k=1,
        created_by=users["admin"],
    )
    note_group = NoteGroup.objects.create(
        run=note_run, number=1, name=f"notes {text}", words=[text], size=1, share=1.0
    )
    span = SpanLabel.objects.create(
        trajectory=trajectory,
        schema=SpanSchema.objects.create(
            project=project, name=f"triage {text}", values=[{"value": f"role {text}"}]
        ),
        annotator=users["admin"],
        start_index=1,
        end_index=3,
        value=f"role {text}",
    )
    return World(
        project=project,
        users=users,
        other_annotator=other,
        trajectory=trajectory,
        other_trajectory=other_trajectory,
        step=step,
        queue=queue,
        import_batch=batch,
        export_job=export_job,
        selection=selection,
        scorer=scorer,
        scoring_run=scoring_run,
        judge=judge,
        attribution_run=attribution_run,
        policy=policy,
        rollout_job=rollout_job,
        label=label,
        membership=other_membership,
        invite=invite,
        invite_secret=invite_secret,
        export_file="train.jsonl",
        api_token_key=api_token.token_key,
        deletion=ProjectDeletion.objects.create(
            slug="gone",
            name=f"gone {text}",
            created_by=users["admin"],
            status=ProjectDeletion.Status.DONE,
            removed={"trajectories": 1, "steps": 3},
        ),
        follow_source=FollowSource.objects.create(
            project=project, path=f"/srv/follow/{slug}", source_format="verl", by_worker=True
        ),
        batch=_batch(export_job, trajectory),
        rule=rule,
        webhook=webhook,
        delivery=delivery,
        span=span,
        final_span=FinalSpan.objects.create(
            trajectory=trajectory,
            schema=span.schema,
            adjudicator=users["admin"],
            start_index=1,
            end_index=3,
            value=f"role {text}",
        ),
        failure_mode_run=failure_mode_run,
        failure_mode=failure_mode,
        note_run=note_run,
        note_group=note_group,
        question=_question(judge, trajectory, step, text, users["admin"]),
    )


def _question(
    judge: Scorer, trajectory: Trajectory, step: Step, text: str, admin: User
) -> Question:
    question = Question.objects.create(
        project=trajectory.project,
        created_by=admin,
        judge=judge,
        judge_name=f"judge {text}"[:200],
        text=f"question {text}",
        status=Question.Status.DONE,
        filters={"origin": "", "outcome": "failure"},
        proposed={"filters": {"outcome": "failure", f"name {text}": 1}, "criterion": text},
        refused={f"name {text}": f"unknown filter {text}"},
        criterion=f"criterion {text}",
        total=1,
        done=1,
        matched=1,
    )
    QuestionAnswer.objects.create(
        question=question, trajectory=trajectory, step=step, matched=True, reason=f"why {text}"
    )
    return question


def _batch(export_job: ExportJob, trajectory: Trajectory) -> ExportBatch:
    """A batch with one version (the world's export) holding the world's trajectory."""
    batch = ExportBatch.objects.create(
        project=export_job.project, name="rl-batch", created_by=export_job.created_by
    )
    ExportJob.objects.filter(pk=export_job.pk).update(batch=batch)
    version = BatchVersion.objects.create(
        batch=batch, number=1, export=export_job, trajectories=1, labels=1
    )
    BatchVersionRow.objects.create(
        version=version,
        trajectory_id=trajectory.pk,
        external_id=trajectory.external_id,
        content_digest="0" * 32,
        label_digest="1" * 32,
        labels={"0": -1},
    )
    return batch
