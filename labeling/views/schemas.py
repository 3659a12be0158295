"""The project's label schemas and labeling settings: every member may read them, admins
edit them. Changing the values or tags makes a new schema version. A project labelled in
several dimensions has a tab per schema (``?schema=<name>``); admins add one here."""

from __future__ import annotations

from typing import cast
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db.models import Count
from django.http import Http404, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from labeling import selectors, services
from labeling.forms import (
    BaseSchemaValueFormSet,
    GuidelinesForm,
    LabelingSettingsForm,
    SchemaAddForm,
    SchemaForm,
    SchemaValueFormSet,
)
from labeling.models import BINARY_VALUES, TERNARY_VALUES, LabelSchema
from stepscope.web import HtmxHttpRequest
from trajectories.models import Membership
from trajectories.selectors import membership_role, project_get_for_user


@login_required
@require_http_methods(["GET", "POST"])
def schema_edit(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    project = project_get_for_user(request.user, slug)
    role = membership_role(request.user, project)
    is_admin = role == Membership.Role.ADMIN
    if request.method == "POST" and not is_admin:
        raise PermissionDenied("Only project admins edit the label schema.")
    # The newest active version of each schema, by name.
    schemas = list(
        LabelSchema.objects.filter(project=project, is_active=True)
        .order_by("name", "-version")
        .distinct("name")
    )
    chosen = request.POST.get("schema") or request.GET.get("schema")
    if chosen:
        schema = next((each for each in schemas if each.name == chosen), None)
        if schema is None:
            raise Http404(f"The project has no label schema named {chosen!r}.")
    else:
        schema = selectors.active_schema(project)
    here = reverse("schema-edit", args=[project.slug])
    if schema is not None and len(schemas) > 1:
        here += "?" + urlencode({"schema": schema.name})
    current = selectors.LabelingSettings.of(project)
    which = request.POST.get("form", "")
    add_form = SchemaAddForm(request.POST if which == "add" else None)
    if which == "add" and add_form.is_valid():
        kind = add_form.cleaned_data["kind"]
        defaults = TERNARY_VALUES if kind == LabelSchema.Kind.TERNARY else BINARY_VALUES
        try:
            added = services.label_schema_create(
                project=project,
                name=add_form.cleaned_data["name"],
                kind=kind,
                values=[{**entry, "key": ""} for entry in defaults],
            )
        except services.LabelingError as error:
            add_form.add_error("name" if error.field == "name" else None, error.message)
        else:
            messages.success(request, f"Added {added.name!r}: give its values keys below.")
            url = reverse("schema-edit", args=[project.slug])
            return HttpResponseRedirect(url + "?" + urlencode({"schema": added.name}))

    schema_form = SchemaForm(
        request.POST if which == "schema" else None,
        initial={
            "kind": schema.kind if schema else LabelSchema.Kind.TERNARY,
            "error_tags": "\n".join(schema.error_tags or []) if schema else "",
            "ask_rationale": schema.ask_rationale if schema else False,
            "first_error_mode": schema.first_error_mode if schema else False,
        },
    )
    values = cast(
        BaseSchemaValueFormSet,
        SchemaValueFormSet(
            request.POST if which == "schema" else None,
            prefix="values",
            initial=[
                {k: e[k] for k in ("value", "name", "key", "color", "error")}
                for e in (schema.entries if schema else [])
            ],
        ),
    )
    settings_form = LabelingSettingsForm(
        request.POST if which == "settings" else None,
        initial={
            "blind_labeling": current.blind_labeling,
            "hide_model_scores": current.hide_model_scores,
            "labels_per_step": current.labels_per_step,
        },
    )
    guidelines_form = GuidelinesForm(
        request.POST if which == "guidelines" else None,
        initial={"guidelines": project.guidelines},
    )
    if which == "guidelines" and guidelines_form.is_valid():
        services.project_guidelines_set(
            project=project, guidelines=guidelines_form.cleaned_data["guidelines"]
        )
        messages.success(request, "Guidelines saved.")
        return HttpResponseRedirect(here)
    if which == "schema" and schema is not None and schema_form.is_valid():
        values.kind = schema_form.cleaned_data["kind"]
        if values.is_valid():
            try:
                saved = services.label_schema_save(
                    schema=schema,
                    kind=schema_form.cleaned_data["kind"],
                    values=values.schema_values(),
                    error_tags=schema_form.cleaned_data["error_tags"],
                    ask_rationale=schema_form.cleaned_data["ask_rationale"],
                    first_error_mode=schema_form.cleaned_data["first_error_mode"],
                )
            except services.LabelingError as error:
                schema_form.add_error(None, error.message)
            else:
                if saved.pk != schema.pk:
                    messages.success(
                        request, f"Saved as {saved}; labels on v{schema.version} keep it."
                    )
                else:
                    messages.success(request, f"Saved {saved}.")
                return HttpResponseRedirect(here)
    if which == "settings" and settings_form.is_valid():
        services.labeling_settings_set(project=project, **settings_form.cleaned_data)
        messages.success(request, "Labeling settings saved.")
        return HttpResponseRedirect(here)

    versions = (
        LabelSchema.objects.filter(project=project, name=schema.name if schema else "")
        .annotate(label_count=Count("labels"))
        .order_by("-version", "-id")
    )
    context = {
        "project": project,
        "schema": schema,
        "is_admin": is_admin,
        "schema_form": schema_form,
        "values": values,
        "settings_form": settings_form,
        "guidelines_form": guidelines_form,
        "versions": versions,
        "schemas": schemas,
        "add_form": add_form,
    }
    return render(request, "labeling/schema_edit.html", context)
