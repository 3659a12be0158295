"""Full-text search over a trajectory's task and step text.

PostgreSQL full-text search with the ``simple`` configuration (lower-cased words, no
stemming and no stop words: the text is code, tool output and several languages as
often as English). The query is ``websearch_to_tsquery``'s syntax: words that must all
appear, ``"a phrase"``, ``or``, and ``-word`` to leave out.

An identifier is a word of its own: PostgreSQL's parser splits ``basic_economy`` at the
underscore, so a search for it matched every text saying "basic economy". Documents and
queries read an underscore between letters as a hyphen, which the parser keeps as one
word beside its parts: ``basic_economy`` finds the identifier, ``basic`` and
``"basic economy"`` still find it among the words (a part of an identifier with more
than two pieces, ``economy_fare`` in ``basic_economy_fare``, is not a word of its own).

The documents live in their own tables (``TrajectorySearch`` for the task,
``StepSearch`` per step), each with a GIN index, filled by a worker after an import
commits (``trajectories.services.search``). An index on ``trajectories_step`` itself
would be kept up by every import, and computing the documents of a million steps costs
more than the whole import otherwise does (``bench/search.py``). A trajectory the worker
has not reached yet (no ``TrajectorySearch`` row) is searched by reading its text, so
a search never misses one; it is only slower until the index catches up.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from django.contrib.postgres.search import SearchQuery, SearchVectorExact, SearchVectorField
from django.db import connection
from django.db.models import Exists, Expression, Func, OuterRef, Q, Value
from django.db.models.functions import Left

from trajectories.models import Project, Step, StepSearch, TrajectorySearch

# Each text's first this many characters are searched: a tsvector holds at most 1 MB,
# and this many characters of any text stay well under it.
SEARCH_CHARS = 100_000


def search_document_sql(column: str) -> str:
    """The one expression the documents are built with, in SQL, of a text column: the
    indexing worker's and the migration that rebuilt them."""
    return f"to_tsvector('simple'::regconfig, translate(left({column}, {SEARCH_CHARS}), '_', '-'))"


class SearchDocument(Func):
    """``search_document_sql`` as an expression: how unindexed text is read."""

    template = "to_tsvector('simple'::regconfig, translate(%(expressions)s, '_', '-'))"
    output_field = SearchVectorField()

    def __init__(self, text: str | Expression, **extra: Any) -> None:
        super().__init__(Left(text, Value(SEARCH_CHARS)), **extra)


# An underscore between two letters or digits, read as the hyphen the documents have.
_IDENTIFIER_JOIN = re.compile(r"(?<=[^\W_])_(?=[^\W_])")


def search_query(text: str) -> SearchQuery:
    return SearchQuery(_IDENTIFIER_JOIN.sub("-", text), config="simple", search_type="websearch")


class ProbedExists(Exists):
    """``EXISTS (... OFFSET 0)``: an EXISTS that PostgreSQL cannot turn into a hashed
    subplan (it will not rewrite a subquery with an OFFSET), so it is tested trajectory
    by trajectory, in the order the outer query reads them."""

    template = "EXISTS(%(subquery)s OFFSET 0)"


def search_condition(project: Project, text: str, *, probe: bool = False) -> Q:
    """Trajectories whose task or some step matches ``text``. The three tests are
    EXISTS subqueries joined by OR; the text of a trajectory is read only after the
    check that it has no document.

    The step test is planned by PostgreSQL, which hashes it for an OR'd EXISTS: every
    matching step document is read once, whatever the page needs. That is right for a
    count and for a rare word, and slow for a common one on a first page (a word in one
    step of 20 reads 50,000 documents of a million steps for 50 rows). ``probe`` tests
    the steps per trajectory instead, newest first, stopping when the page is full:
    ``search_probe_pays`` says when."""
    query = search_query(text)
    marked = TrajectorySearch.objects.filter(trajectory=OuterRef("pk"))
    steps_exist = ProbedExists if probe else Exists
    steps = StepSearch.objects.filter(trajectory=OuterRef("pk"), document=query)
    step_text = Step.objects.filter(trajectory=OuterRef("pk")).filter(
        SearchVectorExact(SearchDocument("content"), query)
    )
    # Probed, never hashed: planned as a hashed subplan it computed the document of every
    # step of the project whenever one trajectory was unindexed (100 s at 9M steps).
    read = Q(SearchVectorExact(SearchDocument("task"), query)) | Q(ProbedExists(step_text))
    return (
        Q(Exists(marked.filter(document=query)))
        | Q(steps_exist(steps))
        | (~Q(Exists(marked)) & read)
    )


# Probing per trajectory must look this many times cheaper than hashing: the estimate
# leaves out the page's other filters, which make a probe read further.
PROBE_MARGIN = 4


def search_probe_pays(text: str, page_size: int) -> bool:
    """Whether a page of ``page_size`` matching trajectories, newest first, is found
    sooner by testing each trajectory's steps than by hashing every matching step
    document, from PostgreSQL's own estimates (one EXPLAIN, no scan). Hashing reads the
    matching documents, M of them; probing reads a trajectory's S steps until the page
    is full, page_size / p trajectories where p = 1 - (1 - M/N)^S of them match (N
    documents in all)."""
    matches = StepSearch.objects.filter(document=search_query(text)).values("pk")
    sql, params = matches.query.sql_with_params()
    # One EXPLAIN, three estimates: the matching documents, all documents, all
    # trajectories (the branches of the Append, in this order).
    with connection.cursor() as cursor:
        cursor.execute(
            f"EXPLAIN (FORMAT JSON) {sql} UNION ALL SELECT step_id FROM"
            f" {StepSearch._meta.db_table} UNION ALL SELECT trajectory_id FROM"
            f" {TrajectorySearch._meta.db_table}",
            params,
        )
        plan = cursor.fetchone()[0]
    if isinstance(plan, str):
        plan = json.loads(plan)
    matching, documents, trajectories = (
        float(branch["Plan Rows"]) for branch in plan[0]["Plan"]["Plans"]
    )
    if documents < 1 or trajectories < 1:
        return False
    steps_each = documents / trajectories
    share = min(1.0, matching / documents)
    matched = 1.0 - math.pow(1.0 - share, steps_each) if share < 1.0 else 1.0
    if matched <= 0.0:
        return False
    probe_reads = page_size / matched * steps_each
    return PROBE_MARGIN * probe_reads < matching
