"""Rollout pages: the project's rollout section (start a job, live progress, cancel) and
the panel under each step of the trajectory page ("roll out from here").

The trajectory page includes ``rollouts/_step_rollout.html`` per step: a link that loads
the panel with HTMX and works as a plain page without JavaScript. A panel, and a job row,
with work in flight polls itself every two seconds, so continuations appear as their
chunks finish, and stops once nothing is running.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from labeling.selectors import labeling_state_for_user
from rollouts import selectors, services
from rollouts.forms import PolicyForm, RolloutJobForm, StepRolloutForm
from rollouts.models import RolloutJob
from stepscope.jobs.views import JobRows
from stepscope.web import HtmxHttpRequest, current_user
from trajectories.models import Project, Step
from trajectories.selectors import project_get_for_user, step_get_for_user

# Step rollouts started from the page are cut into chunks this small, so the panel
# shows continuations a few at a time rather than all at the end.
STEP_CHUNK_CONTINUATIONS = 4
# The add-a-policy form's field names and ids: the project home shows this section beside
# scoring's add-a-scorer form, whose fields have the same names.
POLICY_FORM_PREFIX = "new-policy"


# --- Project section -----------------------------------------------------------------------


def _section(
    request: HtmxHttpRequest,
    project: Project,
    *,
    form: RolloutJobForm | None = None,
    policy_form: PolicyForm | None = None,
) -> HttpResponse:
    policies = list(selectors.policies_for_project(project))
    context: dict[str, Any] = {
        "project": project,
        "can_manage": selectors.can_run_rollouts(request.user, project),
        "jobs": selectors.rollout_jobs_recent(project),
        "training": selectors.demo_policy_training_shown(project),
        "policies": policies,
        "form": form or RolloutJobForm(policies=policies),
        "policy_form": policy_form or PolicyForm(prefix=POLICY_FORM_PREFIX),
    }
    template = "rollouts/project_rollouts.html"
    if request.htmx:
        template += "#rollouts-section"
    return render(request, template, context)


def _managed_project(request: HtmxHttpRequest, slug: str) -> Project:
    project = project_get_for_user(request.user, slug)
    if not selectors.can_run_rollouts(request.user, project):
        raise PermissionDenied("Rollouts need the researcher or admin role.")
    return project


@login_required
@require_GET
def rollouts_section(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    return _section(request, project_get_for_user(request.user, slug))


@login_required
@require_POST
def rollout_job_start(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    project = _managed_project(request, slug)
    form = RolloutJobForm(request.POST, policies=list(selectors.policies_for_project(project)))
    if form.is_valid():
        data = form.cleaned_data
        try:
            services.rollout_job_start(
                project=project,
                policy=data["policy"],
                k=data["k"],
                mode=data["steps"],
                user=current_user(request),
                answer_check=data["answer_check"],
                max_continuations=data["max_continuations"],
            )
        except services.RolloutError as error:
            form.add_error("policy", str(error))
    if form.errors:
        # 200, not 422: htmx does not swap error responses in by default.
        return _section(request, project, form=form)
    if request.htmx:
        return _section(request, project)
    return redirect(reverse("rollouts-section", args=[project.slug]))


@login_required
@require_POST
def policy_create(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    """Add a policy for this project (researchers and admins, as in the API)."""
    project = _managed_project(request, slug)
    form = PolicyForm(request.POST, prefix=POLICY_FORM_PREFIX)
    if form.is_valid():
        data = form.cleaned_data
        try:
            services.policy_create(
                project=project,
                name=data["name"],
                model_ref=data["model_ref"],
                revision=data["revision"],
                parameters=data["parameters"],
                queue=data["queue"] or "gpu",
                user=current_user(request),
            )
        except services.RolloutError as error:
            form.add_error(None, str(error))
    if form.errors:
        return _section(request, project, policy_form=form)
    if request.htmx:
        return _section(request, project)
    return redirect(reverse("rollouts-section", args=[project.slug]))


@login_required
@require_GET
def trajectory_policy_mc(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """The policies' Monte Carlo values of one trajectory's steps, a strip per policy: of
    k continuations the policy wrote from the step's prefix, the share that reached the
    right answer. Hidden like model scores from annotators who have not submitted."""
    state = labeling_state_for_user(request.user, pk)
    context = {
        "trajectory": state.trajectory,
        "strips": selectors.policy_mc_strips(state.trajectory) if state.show_model_scores else [],
    }
    return render(request, "rollouts/_policy_mc.html", context)


# Each job's row polls itself while the job is active; Cancel swaps in the ended row.
_job_rows = JobRows(
    get_for_user=selectors.rollout_job_get_for_user,
    can_manage=selectors.can_run_rollouts,
    cancel=lambda job: services.rollout_job_cancel(job=job),
    template="rollouts/_job_row.html",
    page="rollouts-section",
    name="job",
)
rollout_job_row = _job_rows.row_view()
rollout_job_cancel = _job_rows.cancel_view()


# --- The panel under a step ----------------------------------------------------------------


def _panel(
    request: HtmxHttpRequest, step: Step, *, form: StepRolloutForm | None = None
) -> HttpResponse:
    project = step.trajectory.project
    policies = list(selectors.policies_for_project(project))
    # Monte Carlo values are model evidence: a project that hides model scores from
    # annotators until they submit hides these too, as the trajectory page's strips do.
    shown = labeling_state_for_user(request.user, step.trajectory_id).show_model_scores
    context: dict[str, Any] = {
        "project": project,
        "trajectory": step.trajectory,
        "step": step,
        "rollouts": selectors.step_rollouts(step) if shown else None,
        "can_manage": selectors.can_run_rollouts(request.user, project),
        "policies": policies,
        "form": form or StepRolloutForm(policies=policies),
    }
    template = "rollouts/step_rollouts.html"
    if request.htmx:
        # While work is in flight the live part (values, progress, continuations) polls
        # itself; the form around it stays as the user left it.
        live = request.GET.get("live") and form is None
        template += "#step-rollouts-live" if live else "#step-rollouts-panel"
    return render(request, template, context)


@login_required
@require_GET
def step_rollouts(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    return _panel(request, step_get_for_user(request.user, pk))


@login_required
@require_POST
def step_rollout_start(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    step = step_get_for_user(request.user, pk)
    project = step.trajectory.project
    if not selectors.can_run_rollouts(request.user, project):
        raise PermissionDenied("Rollouts need the researcher or admin role.")
    form = StepRolloutForm(request.POST, policies=list(selectors.policies_for_project(project)))
    if form.is_valid():
        data = form.cleaned_data
        replace = data["replace"]
        try:
            services.rollout_job_start(
                project=project,
                policy=data["policy"],
                k=data["k"],
                mode=RolloutJob.Mode.CRITICAL if replace else RolloutJob.Mode.STEPS,
                user=current_user(request),
                step_ids=[step.pk],
                alternatives={step.pk: data["alternative"]} if replace else None,
                chunk_continuations=STEP_CHUNK_CONTINUATIONS,
            )
        except services.RolloutError as error:
            form.add_error("policy", str(error))
    if form.errors:
        return _panel(request, step, form=form)
    if request.htmx:
        return _panel(request, step)
    return redirect(reverse("step-rollouts", args=[step.pk]))
