"""The project's span schemas (labeling/spans.py): every member reads them, admins add
and edit them. A span schema's keys work only while a run of steps is selected
(shift+j / shift+k), so a key a step schema also uses is allowed; the page notes it, so
the admin knows which label a key gives when no run is selected."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from labeling import services
from labeling.forms import SpanSchemaForm, span_values_text
from labeling.models import LabelSchema
from labeling.spans import TRIAGE_VALUES, SpanSchema
from stepscope.web import HtmxHttpRequest
from trajectories.models import Membership, Project
from trajectories.selectors import membership_role, project_get_for_user


def _step_keys(project: Project) -> dict[str, str]:
    """The keys of the project's active step schemas (lower case), with the schema's name."""
    keys: dict[str, str] = {}
    for schema in LabelSchema.objects.filter(project=project, is_active=True).order_by("id"):
        for entry in schema.entries:
            if entry["key"]:
                keys.setdefault(entry["key"].lower(), schema.name)
    return keys


def _clashes(schema: SpanSchema, step_keys: dict[str, str]) -> list[str]:
    """Notes for the span schema's keys that a step schema of the project also uses."""
    return [
        f"Key {entry['key']!r} ({entry['value']}) also labels the step schema"
        f" {step_keys[entry['key'].lower()]!r}: with a run of steps selected it gives the"
        " span value, otherwise the step label."
        for entry in schema.entries
        if entry["key"] and entry["key"].lower() in step_keys
    ]


@login_required
@require_http_methods(["GET", "POST"])
def span_schemas(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    """GET: the span schemas with their values and key notes, and (admins) a form to add
    one or to edit the one named by ``?schema=``. POST (admins): save that form."""
    project = project_get_for_user(request.user, slug)
    is_admin = membership_role(request.user, project) == Membership.Role.ADMIN
    if request.method == "POST" and not is_admin:
        raise PermissionDenied("Only project admins edit span schemas.")
    schemas = list(SpanSchema.objects.filter(project=project).order_by("id"))
    chosen = request.POST.get("schema") or request.GET.get("schema") or ""
    editing = None
    if chosen:
        editing = next((each for each in schemas if each.name == chosen), None)
        if editing is None:
            raise Http404(f"The project has no span schema named {chosen!r}.")
    initial = (
        {
            "name": editing.name,
            "values": span_values_text(editing.values),
            "is_active": editing.is_active,
        }
        if editing is not None
        else {"values": span_values_text(TRIAGE_VALUES), "is_active": True}
    )
    form = SpanSchemaForm(request.POST if request.method == "POST" else None, initial=initial)
    if editing is not None:
        # An edit keeps the schema's name: spans and queues name it.
        form.fields["name"].disabled = True
    if request.method == "POST" and form.is_valid():
        name = editing.name if editing is not None else form.cleaned_data["name"]
        if editing is None and any(each.name == name.strip() for each in schemas):
            form.add_error("name", f"The project has a span schema named {name!r} already.")
        else:
            try:
                saved = services.span_schema_save(
                    project=project,
                    name=name,
                    values=form.cleaned_data["values"],
                    is_active=form.cleaned_data["is_active"],
                )
            except services.LabelingError as error:
                form.add_error("name" if error.field == "name" else "values", error.message)
            else:
                messages.success(request, f"Saved the span schema {saved.name!r}.")
                return HttpResponseRedirect(reverse("span-schemas", args=[project.slug]))
    step_keys = _step_keys(project)
    rows = [{"schema": each, "notes": _clashes(each, step_keys)} for each in schemas]
    context = {
        "project": project,
        "is_admin": is_admin,
        "rows": rows,
        "form": form,
        "editing": editing,
    }
    return render(request, "labeling/span_schemas.html", context)
