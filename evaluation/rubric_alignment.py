"""Rubric marks compared: one rubric source against another (an LLM judge's rubric run
against the annotators' majority, one annotator against another), per criterion of one
rubric version, on the trajectories both marked. One query per side reads the marks; the
numbers come from :mod:`metrics.rubrics`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from labeling.models import Rubric
from labeling.rubric_sources import (
    RubricSource,
    rubric_marks_read,
    rubric_source_choices,
    rubric_source_parse,
)
from labeling.selectors.rubrics import rubrics_active
from metrics.rubrics import CriterionAlignment, rubric_alignment
from trajectories.models import Project


class AlignmentRefused(ValueError):
    """A request the alignment refuses: ``field`` names the parameter at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True)
class RubricComparison:
    rubric: Rubric
    a: RubricSource
    b: RubricSource
    # Trajectories both sides marked (on any criterion).
    trajectories: int
    criteria: list[CriterionAlignment]

    def rows(self) -> list[tuple[dict[str, Any], CriterionAlignment]]:
        """Each criterion as the rubric states it, with its figures."""
        return list(zip(self.rubric.criteria, self.criteria, strict=True))

    def as_json(self) -> dict[str, Any]:
        return {
            "rubric": self.rubric.name,
            "version": self.rubric.version,
            "a": str(self.a),
            "b": str(self.b),
            "trajectories": self.trajectories,
            "criteria": [
                {"text": criterion["text"], "weight": criterion["weight"], **figures.as_json()}
                for criterion, figures in self.rows()
            ],
        }


def rubric_for_alignment(project: Project, name: str = "", version: int | None = None) -> Rubric:
    """The project's rubric ``name`` (its one current rubric where empty): its current
    version, or version ``version`` where given (an earlier version's marks stay
    comparable after the rubric changed)."""
    current = rubrics_active(project)
    names = ", ".join(repr(r.name) for r in current) or "none"
    chosen = None
    if name:
        chosen = next((rubric for rubric in current if rubric.name == name), None)
        if chosen is None:
            raise AlignmentRefused("rubric", f"no rubric named {name!r} (the project's: {names})")
    elif len(current) != 1:
        raise AlignmentRefused("rubric", f"the project has {names}: name one")
    else:
        chosen = current[0]
    if version is None or version == chosen.version:
        return chosen
    found = Rubric.objects.filter(project=project, name=chosen.name, version=version).first()
    if found is None:
        raise AlignmentRefused(
            "version",
            f"rubric {chosen.name!r} has no version {version} (its versions: 1 to"
            f" {chosen.version})",
        )
    return found


def rubric_versions(rubric: Rubric) -> list[int]:
    """The versions of ``rubric``'s name, newest first."""
    return list(
        Rubric.objects.filter(project_id=rubric.project_id, name=rubric.name)
        .order_by("-version")
        .values_list("version", flat=True)
    )


def rubric_sources_offered(rubric: Rubric) -> list[str]:
    return rubric_source_choices(rubric)


def rubric_compare(
    project: Project, *, a: str, b: str, rubric: str = "", version: int | None = None
) -> RubricComparison:
    """Per-criterion agreement, kappa and evidence overlap of ``b`` against ``a`` on the
    project's rubric (its current version, or ``version``); :class:`AlignmentRefused`
    names the parameter that is wrong."""
    chosen = rubric_for_alignment(project, rubric, version)
    sources: dict[str, RubricSource] = {}
    for field, text in (("a", a), ("b", b)):
        try:
            sources[field] = rubric_source_parse(text)
        except ValueError as error:
            raise AlignmentRefused(field, str(error)) from None
    if str(sources["a"]) == str(sources["b"]):
        raise AlignmentRefused("b", "a and b are the same source")
    marks = {}
    for field, source in sources.items():
        try:
            marks[field] = rubric_marks_read(chosen, source)
        except ValueError as error:
            raise AlignmentRefused(field, str(error)) from None
    both = set(marks["a"]) & set(marks["b"])
    return RubricComparison(
        rubric=chosen,
        a=sources["a"],
        b=sources["b"],
        trajectories=len(both),
        criteria=rubric_alignment(marks["a"], marks["b"], len(chosen.criteria)),
    )
