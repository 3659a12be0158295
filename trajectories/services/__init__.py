"""Writes for the trajectories app, by topic: projects, imports and exports. The names
below are the app's service interface; callers import them from here."""

from trajectories.services.deletion import (
    DeletionRefused,
    project_delete_start,
    project_deletion_run,
)
from trajectories.services.follow import FollowPass, follow_pass_run, follow_source_set
from trajectories.services.import_writer import parents_set
from trajectories.services.imports import (
    ImportRejected,
    import_batch_cancel,
    import_batch_run,
    import_upload_start,
    parser_get,
    trajectory_import,
    trajectory_records_import,
)
from trajectories.services.invites import (
    INVITE_DAYS,
    InviteUnusable,
    invite_accept,
    invite_create,
    invite_get_usable,
    invite_join,
    invite_revoke,
)
from trajectories.services.members import (
    MemberError,
    member_add,
    member_remove,
    member_role_set,
)
from trajectories.services.projects import (
    IMPORTED_ANNOTATOR_PREFIX,
    SlugTaken,
    imported_annotator,
    membership_set,
    project_create,
    project_creation_allowed,
    project_owner_set,
    project_slug_check,
    project_update,
)
from trajectories.services.search import search_index_enqueue, trajectory_search_index

__all__ = [
    "IMPORTED_ANNOTATOR_PREFIX",
    "INVITE_DAYS",
    "DeletionRefused",
    "FollowPass",
    "ImportRejected",
    "InviteUnusable",
    "MemberError",
    "SlugTaken",
    "follow_pass_run",
    "follow_source_set",
    "import_batch_cancel",
    "import_batch_run",
    "import_upload_start",
    "imported_annotator",
    "invite_accept",
    "invite_create",
    "invite_get_usable",
    "invite_join",
    "invite_revoke",
    "member_add",
    "member_remove",
    "member_role_set",
    "membership_set",
    "parents_set",
    "parser_get",
    "project_create",
    "project_creation_allowed",
    "project_delete_start",
    "project_deletion_run",
    "project_owner_set",
    "project_slug_check",
    "project_update",
    "search_index_enqueue",
    "trajectory_import",
    "trajectory_records_import",
    "trajectory_search_index",
]
