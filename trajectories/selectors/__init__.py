"""Named read queries, by topic. Every lookup that starts from a request goes through an
``*_for_user`` helper (:mod:`.access`), which raises 404 for anything outside the user's
projects.

- :mod:`.access`: who may reach a project, trajectory, step or import, and what a role may
  do with its data;
- :mod:`.members`: members, their recorded changes, open invites;
- :mod:`.projects`: the project list and home page (figures, recent imports, followed
  folders, model names);
- :mod:`.filtering`: a selection applied to a project's trajectories, and the conditions
  other apps register;
- :mod:`.listing`: the trajectory list's sorts and pages;
- :mod:`.pages`: the trajectory page's long texts and live state;
- :mod:`.task_tree`: a task's rollouts as a prefix tree.

The names below are the package's: import them from ``trajectories.selectors``.
"""

from __future__ import annotations

from trajectories.selectors.access import (
    MANAGING_ROLES,
    AnyUser,
    can_download_exports,
    can_manage_data,
    import_batch_get_for_user,
    membership_role,
    project_get_for_admin,
    project_get_for_user,
    projects_for_user,
    projects_hiding_exports,
    role_downloads_exports,
    step_get_for_user,
    trajectory_get_for_user,
)
from trajectories.selectors.filtering import (
    SELECTION_RANK,
    FilterCondition,
    SelectionNarrowing,
    selection_check,
    trajectories_filtered,
    trajectory_filter_register,
    trajectory_narrowing_register,
)
from trajectories.selectors.listing import (
    DEFAULT_ORDERING,
    LIST_SORTS,
    TASK_PREVIEW_CHARS,
    TRAJECTORY_PAGE_SIZE,
    ListOrdering,
    list_ordering_parse,
    list_sort_key,
    trajectory_list_page,
)
from trajectories.selectors.members import (
    invites_pending,
    membership_events_recent,
    project_members,
)
from trajectories.selectors.pages import (
    STEP_PREVIEW_CHARS,
    TRAJECTORY_TEXT_FIELDS,
    live_trace_state,
    trajectory_text_full,
)
from trajectories.selectors.projects import (
    FOLLOWED_FILES_SHOWN,
    RECENT_IMPORT_BATCHES,
    ProjectStats,
    follow_sources_for_project,
    import_batches_recent,
    labelable_step_count,
    model_names_for_project,
    project_has_continuations,
    project_list_for_user,
    project_stats,
)
from trajectories.selectors.task_tree import (
    TREE_MAX_ROLLOUTS,
    TREE_PREVIEW_CHARS,
    TaskRollouts,
    TreeStep,
    task_rollouts,
)

__all__ = [
    "DEFAULT_ORDERING",
    "FOLLOWED_FILES_SHOWN",
    "LIST_SORTS",
    "MANAGING_ROLES",
    "RECENT_IMPORT_BATCHES",
    "SELECTION_RANK",
    "STEP_PREVIEW_CHARS",
    "TASK_PREVIEW_CHARS",
    "TRAJECTORY_PAGE_SIZE",
    "TRAJECTORY_TEXT_FIELDS",
    "TREE_MAX_ROLLOUTS",
    "TREE_PREVIEW_CHARS",
    "AnyUser",
    "FilterCondition",
    "ListOrdering",
    "ProjectStats",
    "SelectionNarrowing",
    "TaskRollouts",
    "TreeStep",
    "can_download_exports",
    "can_manage_data",
    "follow_sources_for_project",
    "import_batch_get_for_user",
    "import_batches_recent",
    "invites_pending",
    "labelable_step_count",
    "list_ordering_parse",
    "list_sort_key",
    "live_trace_state",
    "membership_events_recent",
    "membership_role",
    "model_names_for_project",
    "project_get_for_admin",
    "project_get_for_user",
    "project_has_continuations",
    "project_list_for_user",
    "project_members",
    "project_stats",
    "projects_for_user",
    "projects_hiding_exports",
    "role_downloads_exports",
    "selection_check",
    "step_get_for_user",
    "task_rollouts",
    "trajectories_filtered",
    "trajectory_filter_register",
    "trajectory_get_for_user",
    "trajectory_list_page",
    "trajectory_narrowing_register",
    "trajectory_text_full",
]
