"""Answer checks: normalised exact match, the last boxed answer, numbers with a
tolerance, and a Python entry point."""

from __future__ import annotations

import pytest

from rollouts.answers import (
    AnswerCheckError,
    CheckedContinuation,
    CheckedStep,
    CheckedTrajectory,
    check_answer,
    check_parse,
    extract_answer,
    last_boxed,
    normalise,
    parse_number,
)


def run(check: str, truth: str, *steps: str, finished: bool = True) -> bool:
    trajectory = CheckedTrajectory(task="t", ground_truth=truth, steps=())
    continuation = CheckedContinuation(
        prefix_steps=(CheckedStep("Let us start."),),
        generated_steps=steps,
        text="\n".join(steps),
        finished=finished,
    )
    return check_answer(check_parse(check), trajectory, continuation)


def test_numeric_reads_the_answer_of_the_last_step() -> None:
    assert run("numeric", "42", "6 * 7 = 42", "The answer is 42.")
    assert run("numeric", "1234", "The answer is 1,234.")
    assert run("numeric", "0.5", "So the answer: 1/2")
    assert run("numeric", "#### 72", "The answer is 72")
    assert not run("numeric", "42", "The answer is 41.")
    # A number earlier in the step is not the answer.
    assert not run("numeric", "3", "From 3 we get 4, so the answer is 4")
    assert run("numeric:0.01", "100", "The answer is 100.5")
    assert not run("numeric", "100", "The answer is 100.5")


def test_a_continuation_cut_at_the_token_limit_gave_no_answer() -> None:
    assert not run("numeric", "42", "The answer is 42", finished=False)


def test_boxed_takes_the_last_box_with_nested_braces() -> None:
    assert last_boxed(r"first \boxed{1} then \boxed{\frac{1}{2}}") == r"\frac{1}{2}"
    assert run("boxed", r"\frac{1}{2}", r"Hence \boxed{\frac{1}{2}}.")
    assert not run("boxed", "2", "The answer is 2.")
    assert parse_number(r"\frac{3}{4}") == 0.75


def test_exact_normalises_case_latex_and_full_stops() -> None:
    assert normalise(r"$\text{Paris}$.") == "paris"
    assert extract_answer("so the answer is Paris.") == " Paris."
    assert run("exact", "paris", r"The answer is $\text{Paris}$.")
    assert not run("exact", "paris", "The answer is Lyon.")


def test_python_entry_point_decides(monkeypatch: pytest.MonkeyPatch) -> None:
    assert run("python:tests.rollouts.test_answers:mentions_truth", "blue", "It is blue")
    assert not run("python:tests.rollouts.test_answers:mentions_truth", "blue", "It is red")


def mentions_truth(trajectory: CheckedTrajectory, continuation: CheckedContinuation) -> bool:
    return trajectory.ground_truth in continuation.all_text


def test_bad_checks_are_named() -> None:
    for text in ("fuzzy", "numeric:abc", "numeric:2", "python:nomodule"):
        with pytest.raises(AnswerCheckError):
            check_parse(text)
    assert str(check_parse("numeric:0.01")) == "numeric:0.01"
    assert str(check_parse("")) == "numeric"
    with pytest.raises(AnswerCheckError, match="cannot import"):
        run("python:no_such_module_here:f", "1", "1")
