"""Full-text search over a trajectory's task and step text.

PostgreSQL full-text search with the ``simple`` configuration (lower-cased words, no
stemming and no stop words: the text is code, tool output and several languages as
often as English). The query is ``websearch_to_tsquery``'s syntax: words that must all
appear, ``"a phrase"``, ``or``, and ``-word`` to leave out.

The documents live in their own tables (``TrajectorySearch`` for the task,
``StepSearch`` per step), each with a GIN index, filled by a worker after an import
commits (``trajectories.services.search``). An index on ``trajectories_step`` itself
would be kept up by every import, and computing the documents of a million steps costs
more than the whole import otherwise does (``bench/search.py``). A trajectory the worker
has not reached yet (no ``TrajectorySearch`` row) is searched by reading its text, so
a search never misses one; it is only slower until the index catches up.
"""

from __future__ import annotations

from typing import Any

from django.contrib.postgres.search import SearchQuery, SearchVectorExact, SearchVectorField
from django.db.models import Exists, Expression, Func, OuterRef, Q, Value
from django.db.models.functions import Left

from trajectories.models import Project, Step, StepSearch, TrajectorySearch

# Each text's first this many characters are searched: a tsvector holds at most 1 MB,
# and this many characters of any text stay well under it.
SEARCH_CHARS = 100_000
SEARCH_MAX_LENGTH = 500


class SearchDocument(Func):
    """``to_tsvector('simple', left(<text>, SEARCH_CHARS))``: the one expression the
    documents are built with and unindexed text is read with."""

    template = "to_tsvector('simple'::regconfig, %(expressions)s)"
    output_field = SearchVectorField()

    def __init__(self, text: str | Expression, **extra: Any) -> None:
        super().__init__(Left(text, Value(SEARCH_CHARS)), **extra)


def search_query(text: str) -> SearchQuery:
    return SearchQuery(text, config="simple", search_type="websearch")


def search_condition(project: Project, text: str) -> Q:
    """Trajectories whose task or some step matches ``text``. The three tests are
    EXISTS subqueries joined by OR, so the planner may run each once over its index
    (hashed) or per trajectory as it pages newest first (a common word, found at once);
    the text of a trajectory is read only after the check that it has no document."""
    query = search_query(text)
    marked = TrajectorySearch.objects.filter(trajectory=OuterRef("pk"))
    steps = StepSearch.objects.filter(trajectory=OuterRef("pk"), document=query)
    step_text = Step.objects.filter(trajectory=OuterRef("pk")).filter(
        SearchVectorExact(SearchDocument("content"), query)
    )
    read = Q(SearchVectorExact(SearchDocument("task"), query)) | Q(Exists(step_text))
    return Q(Exists(marked.filter(document=query))) | Q(Exists(steps)) | (~Q(Exists(marked)) & read)
