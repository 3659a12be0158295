"""Who may do what, for every URL of the project: each route from the resolver, filled
with objects of one project, is requested (GET and POST) by every role, and the status
must be exactly the one ``ACCESS`` states. A URL added without an entry fails the test,
so whoever adds one has to say who may use it.

Statuses, in the order of ``ROLES`` (anonymous, outsider, annotator, researcher, admin):
``login`` is a redirect to the login page, any other token a status code. The policy:
anonymous visitors are sent to the login page (401 on the API); an outsider (signed in,
no membership) gets a 404 for anything of the project, as if it did not exist; annotators
read and label but get a 403 for importing, exporting, queues, review, scoring, rollouts
and settings; researchers do all of that except editing the label schema and settings,
which is the project admin's."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.contrib import admin
from django.http import HttpResponse
from django.test import Client
from django.urls import reverse

from exports.models import ExportJob
from tests.factories import MembershipFactory
from tests.security.test_rendered_text import renders_pages, template_leftovers
from tests.security.world import ROLES, Visitors, body, build_world, project_routes
from trajectories.services import project_create

pytestmark = pytest.mark.django_db

# Free text of the world; an outsider or an anonymous visitor must never read it.
MARK = "W0RLD-MARK"
# Pages that show the project's name to whoever holds their link, which is the credential.
LINK_HOLDER_PAGES = {"invite-accept"}

# Read-only pages and partials: they refuse other methods.
_GET_ONLY = {"GET": "login 404 200 200 200", "POST": "login 405 405 405 405"}
# Read-only pages of the project admin's.
_GET_ONLY_ADMIN = {"GET": "login 404 403 403 200", "POST": "login 405 405 405 405"}
# Poll rows of a run or job: HTMX gets the row, a plain request is sent to the section.
_ROW = {"GET": "login 404 302 302 302", "POST": "login 404 302 302 302"}
# Writes any member may make (labels, queue moves); an empty form is refused with a
# redirect back and a message.
_MEMBER_WRITE = {"GET": "login 405 405 405 405", "POST": "login 404 302 302 302"}
# Cancel buttons: researchers and admins; a plain form post is redirected back.
_CANCEL = {"GET": "login 405 405 405 405", "POST": "login 404 403 302 302"}
# Forms that start work (scoring, attribution, rollouts): an empty form re-renders (200).
_START = {"GET": "login 405 405 405 405", "POST": "login 404 403 200 200"}

# The API: 401 without a token; an outsider's lists are empty, their objects 404.
_API_LIST = {"GET": "401 200 200 200 200", "POST": "401 405 405 405 405"}
_API_LIST_CREATE = {"GET": "401 200 200 200 200", "POST": "401 400 400 400 400"}
_API_OBJECT = {"GET": "401 404 200 200 200", "POST": "401 405 405 405 405"}
_API_ADMIN_OBJECT = {"GET": "401 404 404 404 200", "POST": "401 405 405 405 405"}
_API_CANCEL = {"GET": "401 405 405 405 405", "POST": "401 404 403 200 200"}
# API writes checked before any project is named: an empty body is a 400 for everyone.
_API_POST_ONLY = {"GET": "401 405 405 405 405", "POST": "401 400 400 400 400"}
# Queue moves any member may make (the world's queue takes everyone).
_API_MEMBER_MOVE = {"GET": "401 405 405 405 405", "POST": "401 404 200 200 200"}
# Open to anyone: probes for load balancers, and the API's description.
_PUBLIC = {"GET": "200 200 200 200 200", "POST": "405 405 405 405 405"}

ACCESS: dict[str, dict[str, str]] = {
    "healthz": _PUBLIC,
    "readyz": _PUBLIC,
    # Staff only (a Django staff account, not a project role): others go to the admin login.
    "admin-status": {"GET": "302 302 302 302 302", "POST": "302 302 302 302 302"},
    "login": {"GET": "200 200 200 200 200", "POST": "200 200 200 200 200"},
    "logout": {"GET": "405 405 405 405 405", "POST": "login login login login login"},
    # Your own API tokens: every signed-in user has the page; a token of another user
    # (the world's is the admin's) is a 404. An empty form re-renders with its errors.
    "token-list": {"GET": "login 200 200 200 200", "POST": "login 200 200 200 200"},
    "token-revoke": {"GET": "login 405 405 405 405", "POST": "login 404 404 404 302"},
    # Browse pages.
    # Any signed-in user may create a project (STEPSCOPE_PROJECT_CREATORS=any); an empty
    # form re-renders with its errors.
    "project-list": {"GET": "login 200 200 200 200", "POST": "login 200 200 200 200"},
    "project-home": _GET_ONLY,
    # Members: the project admin's. An empty form or a missing role is a 400 that names the
    # field; the world's second annotator can be removed (302 back to the page).
    "member-list": {"GET": "login 404 403 403 200", "POST": "login 404 403 403 400"},
    # Settings and deletion: the project admin's. An empty settings form has no name, an
    # empty deletion form no slug typed: 400s, nothing changed or deleted.
    "project-settings": {"GET": "login 404 403 403 200", "POST": "login 404 403 403 400"},
    "project-delete": {"GET": "login 405 405 405 405", "POST": "login 404 403 403 400"},
    "follow-sources": {"GET": "login 404 403 403 200", "POST": "login 404 403 403 400"},
    "follow-source-remove": {"GET": "login 405 405 405 405", "POST": "login 404 403 403 302"},
    # Rules and webhooks: the project admin's (a webhook's URL and a rule's targets are the
    # project's plumbing). An empty form is a 400 naming what is missing.
    "rule-list": {"GET": "login 404 403 403 200", "POST": "login 404 403 403 400"},
    "rule-detail": _GET_ONLY_ADMIN,
    "rule-active": {"GET": "login 405 405 405 405", "POST": "login 404 403 403 302"},
    "rule-backfill": {"GET": "login 405 405 405 405", "POST": "login 404 403 403 302"},
    "webhook-list": {"GET": "login 404 403 403 200", "POST": "login 404 403 403 400"},
    "webhook-detail": _GET_ONLY_ADMIN,
    "webhook-redeliver": {"GET": "login 405 405 405 405", "POST": "login 404 403 403 302"},
    # Switched off or on; deleted once its name is typed (else back to its page, 302).
    "webhook-active": {"GET": "login 405 405 405 405", "POST": "login 404 403 403 302"},
    "webhook-delete": {"GET": "login 405 405 405 405", "POST": "login 404 403 403 302"},
    # A deletion's page is its starter's (the world's admin); for anyone else it is not there.
    "project-deletion": {"GET": "login 404 404 404 200", "POST": "login 405 405 405 405"},
    "member-role": {"GET": "login 405 405 405 405", "POST": "login 404 403 403 400"},
    "member-remove": {"GET": "login 405 405 405 405", "POST": "login 404 403 403 302"},
    # An admin makes invite links (an empty form has no role: 400).
    "invite-new": {"GET": "login 405 405 405 405", "POST": "login 404 403 403 400"},
    "invite-revoke": {"GET": "login 405 405 405 405", "POST": "login 404 403 403 302"},
    # The link is the credential: whoever holds it sees the form (and the project's name);
    # an empty form is a 400.
    "invite-accept": {"GET": "200 200 200 200 200", "POST": "400 400 400 400 400"},
    "trajectory-list": _GET_ONLY,
    "task-tree": _GET_ONLY,
    "trajectory-detail": _GET_ONLY,
    # Which scorer and run the trajectory pages show: any member picks for themselves.
    "trajectory-evidence-choose": _MEMBER_WRITE,
    "rollout-diff": _GET_ONLY,
    "step-content": _GET_ONLY,
    # The policies' Monte Carlo strips of a trajectory (empty where scores are hidden).
    "trajectory-policy-mc": _GET_ONLY,
    # A trajectory's whole task, ground truth or metadata, which its page shows in part.
    "trajectory-text": _GET_ONLY,
    "import-detail": _GET_ONLY,
    "import-cancel": _CANCEL,
    "import-new": {"GET": "login 404 403 200 200", "POST": "login 404 403 400 400"},
    # Everyone sees the exports; researchers and admins start and cancel them.
    "export-list": {"GET": "login 404 200 200 200", "POST": "login 404 403 400 400"},
    # What an export would hold (its records carry labels): researchers and admins; an
    # empty form is a preview of what to choose (200).
    "export-preview": {"GET": "login 404 403 200 200", "POST": "login 405 405 405 405"},
    "export-detail": {"GET": "login 404 200 200 200", "POST": "login 404 403 200 200"},
    "export-download": _GET_ONLY,
    # Versioned batches: members read them (the diff only where labels are not hidden).
    "batch-list": _GET_ONLY,
    "batch-detail": _GET_ONLY,
    "selection-list": {"GET": "login 404 200 200 200", "POST": "login 404 403 400 400"},
    "selection-delete": {"GET": "login 404 302 302 302", "POST": "login 404 403 302 302"},
    # The labeling surface.
    "step-label": {"GET": "login 404 200 200 200", "POST": "login 404 302 302 302"},
    "step-history": _GET_ONLY,
    "trajectory-steps": _GET_ONLY,
    "label-undo": _MEMBER_WRITE,
    "trajectory-submit": _MEMBER_WRITE,
    # The decisive-failure panel: every member reads it (a page without HTMX); an empty
    # form clears the user's own, which the annotator without a lease may not (refused,
    # redirected back with the reason).
    "decisive-failure": {"GET": "login 404 200 200 200", "POST": "login 404 302 302 302"},
    # The span panel: every member reads it (a page without HTMX); an empty form is refused
    # with a redirect back. Removing a span: only your own (the world's is the admin's);
    # anyone else's refusal is a redirect back with the message, an outsider's a 404.
    "trajectory-spans": {"GET": "login 404 200 200 200", "POST": "login 404 302 302 302"},
    "span-delete": _MEMBER_WRITE,
    # Span schemas: every member reads them, the admin edits (an empty form re-renders).
    "span-schemas": {"GET": "login 404 200 200 200", "POST": "login 404 403 403 200"},
    "guidelines": _GET_ONLY,
    # The rubric and episode-verdict panels: every member reads them (a page without
    # HTMX); an empty form is refused (or, for a verdict, clears the user's own, which the
    # annotator without a lease may not): redirected back with the reason.
    "rubric-panel": {"GET": "login 404 200 200 200", "POST": "login 404 302 302 302"},
    "episode-panel": {"GET": "login 404 200 200 200", "POST": "login 404 302 302 302"},
    # Every member reads the rubric; only the project admin saves a new version (an
    # empty one is refused with a message, redirected back).
    "rubric-edit": {"GET": "login 404 200 200 200", "POST": "login 404 403 403 302"},
    # Queues: members take, skip and see them; researchers and admins make and close them.
    "queue-list": _GET_ONLY,
    "queue-detail": _GET_ONLY,
    "queue-create": {"GET": "login 404 403 200 200", "POST": "login 404 403 200 200"},
    "queue-next": _MEMBER_WRITE,
    "queue-skip": _MEMBER_WRITE,
    "queue-active": _CANCEL,
    # Review and adjudication: researchers and admins.
    "review-list": {"GET": "login 404 403 200 200", "POST": "login 405 405 405 405"},
    "review-trajectory": {"GET": "login 404 403 200 200", "POST": "login 405 405 405 405"},
    "final-label": _CANCEL,
    # Span review: reviewers read it; an empty form is refused with a redirect back.
    "review-spans": {"GET": "login 404 403 200 200", "POST": "login 404 403 302 302"},
    # Every member reads the schema; only the project admin changes it.
    "schema-edit": {"GET": "login 404 200 200 200", "POST": "login 404 403 403 200"},
    # Compare pages: annotators too, in a project that neither labels blind nor hides
    # scores (test_blind.py covers the other case).
    "compare": _GET_ONLY,
    "compare-steps": _GET_ONLY,
    "compare-first-errors": _GET_ONLY,
    "compare-humans": _GET_ONLY,
    "compare-decisive": _GET_ONLY,
    "compare-rubrics": _GET_ONLY,
    "compare-disagreements": _GET_ONLY,
    "compare-disagreement-queue": _CANCEL,
    "failure-overview": _GET_ONLY,
    # A judge's alignment page: readers as for compare; a new prompt version or a run is
    # for researchers and admins (an empty form names what is missing: 400).
    "judge-alignment": _GET_ONLY,
    "judge-alignment-examples": {"GET": "login 405 405 405 405", "POST": "login 404 403 400 400"},
    "judge-alignment-score": {"GET": "login 405 405 405 405", "POST": "login 404 403 400 400"},
    "failure-list": _GET_ONLY,
    # Failure modes: read like the failures page; starting a run and a mode's one-click
    # queue, selection, judge run and export are for researchers and admins (redirected
    # back with a message).
    "failure-modes": _GET_ONLY,
    "failure-modes-start": _CANCEL,
    "failure-mode-queue": _CANCEL,
    "failure-mode-selection": _CANCEL,
    # A judge run over the mode (no judge named: redirected back with why) and the export
    # form with the mode's selection (redirected there).
    "failure-mode-judge": _CANCEL,
    "failure-mode-export": _CANCEL,
    "failure-mode-run-row": _ROW,
    "failure-mode-run-cancel": _CANCEL,
    # Notes to taxonomy: grouping notes is for researchers and admins; making a group an
    # error tag for the project admin, who edits schemas (an empty form: redirected back
    # with why).
    "notes-start": _CANCEL,
    "note-group-tag": {"GET": "login 405 405 405 405", "POST": "login 404 403 403 302"},
    "note-run-row": _ROW,
    "note-run-cancel": _CANCEL,
    # Questions in plain language: members read them; researchers and admins ask (an
    # empty form names what is missing: 400).
    "question-list": {"GET": "login 404 200 200 200", "POST": "login 404 403 400 400"},
    "question-detail": _GET_ONLY,
    "question-row": _ROW,
    "question-cancel": _CANCEL,
    # Scoring and attribution.
    "scoring-section": _GET_ONLY,
    "scoring-run-start": _START,
    "scorer-train": _START,
    "scorer-create": _START,
    "scoring-run-row": _ROW,
    "scoring-run-cancel": _CANCEL,
    "attribution-run-start": _START,
    "attribution-run-row": _ROW,
    "attribution-run-cancel": _CANCEL,
    "step-saliency": {"GET": "login 404 200 200 200", "POST": "login 404 403 200 200"},
    "trajectory-evidence": _GET_ONLY,
    # Rollouts.
    "rollouts-section": _GET_ONLY,
    "rollout-job-start": _START,
    # Adding a policy for the project: researchers and admins, as in the API; an empty
    # form re-renders with its errors.
    "policy-create": _START,
    "rollout-job-row": _ROW,
    "rollout-job-cancel": _CANCEL,
    "step-rollouts": _GET_ONLY,
    "step-rollout-start": _START,
    # The OTLP/HTTP receiver: 401 without a token; with one, a GET is 405 and the empty
    # POST's missing content type a 415, before any project is named (the project's
    # 404 / 403 are in tests/trajectories/test_otlp_receiver.py).
    "otlp-traces": {"GET": "401 405 405 405 405", "POST": "401 415 415 415 415"},
    # The REST API.
    "api:api-root": _API_LIST,
    "api:api-schema": _PUBLIC,
    "api:api-docs": _PUBLIC,
    # Any signed-in user may create a project: an empty body is a 400.
    "api:project-list": _API_LIST_CREATE,
    "api:project-detail": _API_OBJECT,
    # Members and invites, the members page's API: the project admin's. An empty body
    # names the missing field (400); the world's second annotator can be removed (204).
    "api:api-member-list": {"GET": "401 404 403 403 200", "POST": "401 404 403 403 400"},
    "api:api-member-events": {"GET": "401 404 403 403 200", "POST": "401 405 405 405 405"},
    "api:api-member-role": {"GET": "401 405 405 405 405", "POST": "401 404 403 403 400"},
    "api:api-member-remove": {"GET": "401 405 405 405 405", "POST": "401 404 403 403 204"},
    "api:api-invite-list": {"GET": "401 404 403 403 200", "POST": "401 404 403 403 400"},
    "api:api-invite-revoke": {"GET": "401 405 405 405 405", "POST": "401 404 403 403 204"},
    # Followed folders, the followed folders page's API: the project admin's. An empty
    # body names the missing fields (400); the world's folder can be removed (204).
    "api:api-follow-source-list": {"GET": "401 404 403 403 200", "POST": "401 404 403 403 400"},
    "api:api-follow-source-detail": {
        "GET": "401 404 403 403 200",
        "POST": "401 405 405 405 405",
    },
    "api:api-follow-source-remove": {
        "GET": "401 405 405 405 405",
        "POST": "401 404 403 403 204",
    },
    "api:project-deletion-detail": {"GET": "401 404 404 404 200", "POST": "401 405 405 405 405"},
    # Failure modes: readers as for compare; a run (an empty body takes the defaults) is
    # started by researchers and admins.
    "api:api-failure-modes": {"GET": "401 404 200 200 200", "POST": "401 404 403 202 202"},
    "api:failure-mode-run-detail": _API_OBJECT,
    "api:failure-mode-run-cancel": _API_CANCEL,
    # Questions: members read them; researchers and admins ask (an empty body: 400).
    "api:api-questions": {"GET": "401 404 200 200 200", "POST": "401 404 403 400 400"},
    "api:api-question-detail": _API_OBJECT,
    "api:api-question-cancel": _API_CANCEL,
    "api:trajectory-list": _API_LIST,
    "api:trajectory-detail": _API_OBJECT,
    "api:trajectory-labels": _API_OBJECT,
    "api:step-list": _API_LIST,
    "api:step-detail": _API_OBJECT,
    # POST with an empty body: invalid (400) before any project is named.
    "api:import-list": _API_LIST_CREATE,
    "api:import-detail": _API_OBJECT,
    "api:import-cancel": _API_CANCEL,
    "api:export-list": _API_LIST_CREATE,
    "api:export-detail": _API_OBJECT,
    "api:export-cancel": _API_CANCEL,
    "api:export-download": _API_OBJECT,
    # Batches (``?project=SLUG``): an outsider's project is a 404.
    "api:api-batch-list": _API_OBJECT,
    "api:api-batch-detail": _API_OBJECT,
    "api:api-batch-version": _API_OBJECT,
    "api:api-batch-diff": _API_OBJECT,
    # Asked about the project by slug: the outsider's answer is a 404 like everywhere.
    "api:api-compare": {"GET": "401 404 200 200 200", "POST": "401 405 405 405 405"},
    "api:api-compare-decisive": {"GET": "401 404 200 200 200", "POST": "401 405 405 405 405"},
    # Without a and b (and with no rubric in the world) members are told what is missing.
    "api:api-rubric-alignment": {"GET": "401 404 400 400 400", "POST": "401 405 405 405 405"},
    "api:scorer-alignment": {"GET": "401 404 200 200 200", "POST": "401 405 405 405 405"},
    "api:label-list": _API_LIST_CREATE,
    "api:label-detail": _API_OBJECT,
    "api:label-bulk": _API_POST_ONLY,
    # The annotator holds no lease on the world's trajectory (403); researchers and admins
    # may submit it, but not with its steps unlabelled (400).
    "api:api-trajectory-submit": {"GET": "401 405 405 405 405", "POST": "401 404 403 400 400"},
    # An empty body clears your decisive failure: the annotator holds no lease (403).
    "api:api-trajectory-decisive": {"GET": "401 405 405 405 405", "POST": "401 404 403 200 200"},
    # A trajectory's spans (empty body: 400 naming the fields) and one span (removed with
    # DELETE: OTHER_WRITES).
    "api:api-trajectory-spans": {"GET": "401 404 200 200 200", "POST": "401 404 400 400 400"},
    "api:api-span-detail": _API_OBJECT,
    # Final (adjudicated) spans: members read them; researchers and admins set one (an
    # empty body: 400 naming the fields), the annotator may not (403). One final span
    # (removed with DELETE: OTHER_WRITES).
    "api:api-trajectory-final-spans": {
        "GET": "401 404 200 200 200",
        "POST": "401 404 403 400 400",
    },
    "api:api-final-span-detail": _API_OBJECT,
    # Rubrics: members read them, admins save a new version (an empty body is a 400).
    "api:api-project-rubrics": {"GET": "401 404 200 200 200", "POST": "401 404 403 403 400"},
    # Rubric marks: an empty body names the missing fields (400) once membership is checked.
    "api:api-trajectory-rubric": {"GET": "401 404 200 200 200", "POST": "401 404 400 400 400"},
    # An empty body clears your episode verdict: the annotator holds no lease (403).
    "api:api-trajectory-episode": {"GET": "401 404 200 200 200", "POST": "401 404 403 200 200"},
    "api:api-queue-list": _API_LIST,
    "api:api-queue-detail": _API_OBJECT,
    "api:api-queue-lease": _API_OBJECT,
    "api:api-queue-next": _API_MEMBER_MOVE,
    "api:api-queue-skip": _API_MEMBER_MOVE,
    # Nobody holds a lease in the world's queue: nothing to submit (400).
    "api:api-queue-submit": {"GET": "401 405 405 405 405", "POST": "401 404 400 400 400"},
    # Scores, credits and MC values of one trajectory (the world hides no scores).
    "api:trajectory-scores": _API_OBJECT,
    "api:trajectory-credits": _API_OBJECT,
    "api:trajectory-mc": _API_OBJECT,
    "api:scores-import": _API_POST_ONLY,
    # The reward service: the project is named in the body (or the OpenRLHF route's
    # query), so an empty request is a 400 for everyone; outsiders get 404s (its tests).
    "api:rewards": _API_POST_ONLY,
    "api:rewards-openrlhf": _API_POST_ONLY,
    "api:api-token-list": {"GET": "401 200 200 200 200", "POST": "401 400 400 400 400"},
    "api:api-token-revoke": {"GET": "401 405 405 405 405", "POST": "401 404 404 404 200"},
    "api:scorer-list": _API_LIST_CREATE,
    "api:scorer-detail": _API_OBJECT,
    "api:scorer-train": {"GET": "401 405 405 405 405", "POST": "401 400 400 400 400"},
    # A judge's prompt versions: members read them; researchers and admins add one (the
    # world's scorer is a PRM, so that is a 400 naming it).
    "api:scorer-prompts": {"GET": "401 404 200 200 200", "POST": "401 404 403 400 400"},
    "api:scoring-run-list": _API_LIST_CREATE,
    "api:scoring-run-detail": _API_OBJECT,
    "api:scoring-run-cancel": _API_CANCEL,
    "api:attribution-run-list": _API_LIST_CREATE,
    "api:attribution-run-detail": _API_OBJECT,
    "api:attribution-run-cancel": _API_CANCEL,
    "api:attribution-run-credits": _API_OBJECT,
    "api:policy-list": _API_LIST_CREATE,
    "api:policy-detail": _API_OBJECT,
    "api:rollout-list": _API_LIST_CREATE,
    "api:rollout-detail": _API_OBJECT,
    "api:rollout-cancel": _API_CANCEL,
    # Rules and webhooks: only the project's admins see them (anyone else's lists are
    # empty, their objects 404s). An empty body is a 400 before any project is named.
    "api:rule-list": _API_LIST_CREATE,
    "api:rule-detail": _API_ADMIN_OBJECT,
    "api:rule-firings": _API_ADMIN_OBJECT,
    "api:rule-backfill": {"GET": "401 405 405 405 405", "POST": "401 404 404 404 202"},
    "api:rule-active": {"GET": "401 405 405 405 405", "POST": "401 404 404 404 400"},
    "api:webhook-list": _API_LIST_CREATE,
    "api:webhook-detail": _API_ADMIN_OBJECT,
    "api:webhook-deliveries": _API_ADMIN_OBJECT,
    "api:webhook-active": {"GET": "401 405 405 405 405", "POST": "401 404 404 404 400"},
    "api:webhook-delivery-detail": _API_ADMIN_OBJECT,
    # Sent again under the same webhook-id (202).
    "api:webhook-delivery-redeliver": {"GET": "401 405 405 405 405", "POST": "401 404 404 404 202"},
}


# In a project that hides labels and model scores from annotators (blind labeling, hidden
# scores), an export's files and its manifest (label distributions, annotators, counts per
# source) are for researchers and admins; annotators still follow the job. What differs
# from ACCESS there, for GET; ``manifest`` says, per role, whether the API's answer holds
# the manifest ("-" where there is no answer to read).
HIDING_ACCESS: dict[str, dict[str, str]] = {
    "export-download": {"GET": "login 404 403 200 200"},
    "api:export-download": {"GET": "401 404 403 200 200"},
    "api:api-batch-diff": {"GET": "401 404 403 200 200"},
    "api:export-list": {"GET": "401 200 200 200 200", "manifest": "- - no yes yes"},
    "api:export-detail": {"GET": "401 404 200 200 200", "manifest": "- - no yes yes"},
}


def outcome(response: HttpResponse) -> str:
    if response.status_code == 302 and response["Location"].startswith("/login/"):
        return "login"
    return str(response.status_code)


def test_every_url_has_a_stated_access() -> None:
    keys = {route.key for route in project_routes()}
    missing = sorted(keys - ACCESS.keys())
    stale = sorted(ACCESS.keys() - keys)
    assert not missing, f"URLs without an entry in ACCESS (say who may use them): {missing}"
    assert not stale, f"entries in ACCESS for URLs that no longer exist: {stale}"


def test_each_role_gets_exactly_the_stated_status(tmp_path: Path) -> None:
    """Also, as these GETs are every page for every role: no page shows template syntax
    (test_rendered_text.py, which walks the partials)."""
    world = build_world(tmp_path, text=MARK)
    visitors = Visitors(world)
    wrong = []
    leaks = []
    syntax = []
    pages = 0
    for route in project_routes():
        for method in ("GET", "POST"):
            expected = ACCESS[route.key][method].split()
            for role, want in zip(ROLES, expected, strict=True):
                response = visitors.request(route, role, method)
                got = outcome(response)
                if got != want:
                    wrong.append(f"{method} {route.path(world)} as {role}: {got}, expected {want}")
                outside = role in ("anonymous", "outsider")
                if outside and route.key not in LINK_HOLDER_PAGES and MARK in body(response):
                    leaks.append(f"{method} {route.path(world)} as {role}")
                if method == "GET" and renders_pages(route):
                    found = template_leftovers(response)
                    pages += found is not None
                    syntax += [f"{route.path(world)} as {role}: {text}" for text in found or []]
    assert not wrong, "\n".join(wrong)
    assert not leaks, "the project's content reached non-members:\n" + "\n".join(leaks)
    assert pages > 200
    assert not syntax, "template syntax on the page:\n" + "\n".join(syntax)


SECRET_ANNOTATOR = "annotator-in-the-manifest-51c2"


def test_a_project_that_hides_labels_keeps_export_manifests_from_annotators(
    tmp_path: Path,
) -> None:
    world = build_world(tmp_path, text=MARK, blind=True)
    manifest = {"label_distribution": {"resolved": {"1": 3}}, "annotators": [SECRET_ANNOTATOR]}
    ExportJob.objects.filter(pk=world.export_job.pk).update(manifest=manifest)
    visitors = Visitors(world)
    wrong = []
    for route in project_routes():
        if route.key not in HIDING_ACCESS:
            continue
        expected = HIDING_ACCESS[route.key]
        holds = expected.get("manifest", "- - - - -").split()
        for role, want, held in zip(ROLES, expected["GET"].split(), holds, strict=True):
            response = visitors.request(route, role, "GET")
            got = outcome(response)
            if got != want:
                wrong.append(f"GET {route.path(world)} as {role}: {got}, expected {want}")
            if held != "-" and got == "200":
                answer = response.json()
                jobs = answer.get("results", [answer])
                assert [job["id"] for job in jobs] == [world.export_job.pk]
                if (jobs[0]["manifest"] == manifest) != (held == "yes"):
                    wrong.append(f"GET {route.path(world)} as {role}: manifest {held} expected")
                if held == "no" and SECRET_ANNOTATOR in body(response):
                    wrong.append(f"GET {route.path(world)} as {role}: the manifest's text leaked")
    assert not wrong, "\n".join(wrong)


def test_the_export_list_takes_its_project(tmp_path: Path) -> None:
    """``?project=SLUG`` lists that project's exports only."""
    world = build_world(tmp_path, text=MARK)
    elsewhere = project_create(slug="elsewhere", name="elsewhere")
    MembershipFactory.create(user=world.users["researcher"], project=elsewhere, role="researcher")
    other = ExportJob.objects.create(
        project=elsewhere, format="kto", label_source="human:majority", neutral="drop"
    )
    visitors = Visitors(world)
    route = next(route for route in project_routes() if route.key == "api:export-list")

    def listed(query: str) -> list[int]:
        response = visitors.request(route, "researcher", "GET", query=query)
        assert response.status_code == 200, body(response)
        return sorted(job["id"] for job in response.json()["results"])

    assert listed("?project=demo") == [world.export_job.pk]
    assert listed("?project=elsewhere") == [other.pk]
    assert listed("") == sorted([world.export_job.pk, other.pk])
    # A project the user is not a member of is a 404, as one that does not exist.
    assert visitors.request(route, "outsider", "GET", query="?project=demo").status_code == 404
    assert visitors.request(route, "researcher", "GET", query="?project=nowhere").status_code == 404


# The only API writes besides POST: a project's admins change it (an empty PATCH changes
# nothing: 200) and delete it (without the slug typed in ``confirm``: 400, nothing gone);
# a span, a webhook.
OTHER_WRITES = {
    "api:project-detail": {"PATCH": "401 404 403 403 200", "DELETE": "401 404 403 403 400"},
    # Your own span (the world's is the admin's): the annotator holds no lease (403), the
    # researcher's is not theirs (404).
    "api:api-span-detail": {"DELETE": "401 404 403 404 204"},
    # A webhook no rule calls: its project's admins delete it (only they see it).
    "api:webhook-detail": {"DELETE": "401 404 404 404 204"},
    # A final span: researchers and admins remove it; the annotator may not (403).
    "api:api-final-span-detail": {"DELETE": "401 404 403 204 204"},
}


def test_the_api_has_no_other_put_patch_or_delete(tmp_path: Path) -> None:
    """Writes go through POST (the matrix above states them), apart from OTHER_WRITES;
    every other API route refuses the other write methods, even for the project admin."""
    world = build_world(tmp_path, text=MARK)
    visitors = Visitors(world)
    wrong = []
    for route in project_routes():
        if not route.is_api:
            continue
        for method in ("PUT", "PATCH", "DELETE"):
            expected = OTHER_WRITES.get(route.key, {}).get(method)
            if expected is None:
                # Only the admin's 405 is checked here (the others may be turned away
                # sooner, with a 401 or a 404), so only the admin asks.
                got = outcome(visitors.request(route, "admin", method))
                if got != "405":
                    wrong.append(f"{method} {route.path(world)} as admin: {got}, expected 405")
                continue
            for role, want in zip(ROLES, expected.split(), strict=True):
                got = outcome(visitors.request(route, role, method))
                if got != want and (want != "405" or role == "admin"):
                    wrong.append(f"{method} {route.path(world)} as {role}: {got}, expected {want}")
    assert not wrong, "\n".join(wrong)


def test_the_admin_site_is_for_staff_only(tmp_path: Path) -> None:
    """Django's admin site (left out of the matrix: it is Django's, with its own staff
    check) sends every project role to its login page: a project admin is not staff."""
    world = build_world(tmp_path, text=MARK)
    paths = ["/admin/"]
    for model in admin.site._registry:
        meta = model._meta
        paths.append(reverse(f"admin:{meta.app_label}_{meta.model_name}_changelist"))
        paths.append(reverse(f"admin:{meta.app_label}_{meta.model_name}_add"))
        paths.append(reverse("admin:app_list", args=[meta.app_label]))
    wrong = []
    for role in ROLES:
        client = Client()
        if role != "anonymous":
            client.force_login(world.users[role])
        for path in paths:
            response = client.get(path)
            if response.status_code != 302 or not response["Location"].startswith("/admin/login/"):
                wrong.append(f"{path} as {role}: {response.status_code}")
    assert len(paths) > 5
    assert not wrong, "\n".join(wrong)
