"""What LLM judges and failure attribution add to exports, in the Django-free writers: a
judge's critiques beside trl-stepwise's labels, the ``critique`` format's SFT rows, and
the decisive failure in the trajectory-level records (issues 23 and 22)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from exports.writers import build_records, records, write_export
from exports.writers.records import to_parsed
from tests.exports.test_writers import options, parse_all, step, trajectory
from trajectories.formats.base import ParsedDecisive

TASK = "What is 2 + 3 * 4?"
HOSTILE = '<script>alert("x")</script> & "quotes"'


def judged_run(decisive: ParsedDecisive | None = None) -> list:
    """A failed run: a user turn, a right step the judge approves, a wrong one it
    flags (with markup in its critique), a tool result, and an unlabelled last step the
    judge did not answer."""
    return [
        trajectory(
            1,
            [
                step(TASK, role="user", kind="message"),
                step(
                    "3 * 4 = 12.",
                    1,
                    critique="Right.",
                    judgment="Right.\n\\boxed{+1}",
                    judge_verdict=1,
                ),
                step(
                    "12 + 2 = 15.",
                    -1,
                    critique=HOSTILE,
                    judgment=f"  {HOSTILE}\n\\boxed{{-1}}  ",
                    judge_verdict=-1,
                ),
                step("15", role="tool", kind="tool_result"),
                step("The answer is 15.", None),
            ],
            task=TASK,
            success=False,
            decisive=decisive,
        )
    ]


def test_trl_stepwise_critiques_sit_beside_each_completion() -> None:
    [record] = records("trl-stepwise", judged_run(), options(critiques="judge"))
    assert list(record) == ["prompt", "completions", "labels", "critiques"]
    assert record["completions"] == ["3 * 4 = 12.", "12 + 2 = 15."]
    assert record["labels"] == [True, False]
    # Model text as it is: nothing escaped in a file.
    assert record["critiques"] == ["Right.", HOSTILE]


def test_trl_stepwise_critique_is_null_where_the_judge_said_nothing() -> None:
    run = judged_run()
    run[0].steps[1].critique = None
    [record] = records(
        "trl-stepwise", run, options(critiques="judge", stop_at_first_error=False, neutral="drop")
    )
    assert record["critiques"] == [None, HOSTILE]
    assert len(record["critiques"]) == len(record["completions"])


def test_without_the_options_records_are_as_before() -> None:
    [record] = records("trl-stepwise", judged_run(ParsedDecisive("assistant", 2, "why")), options())
    assert list(record) == ["prompt", "completions", "labels"]


def test_critique_rows_are_sft_prompt_and_completion() -> None:
    tally: Counter[str] = Counter()
    rows = [
        record
        for _, _, record in build_records(
            "critique", judged_run(), options(critiques="judge"), tally=tally
        )
    ]
    assert rows == [
        {
            "id": "run-1",
            "step_index": 1,
            "prompt": f"{TASK}\n\n3 * 4 = 12.\n\n",
            "completion": "Right.\n\\boxed{+1}",
            "verdict": 1,
            "label": 1,
            "agrees": True,
        },
        {
            "id": "run-1",
            "step_index": 2,
            "prompt": f"{TASK}\n\n3 * 4 = 12.\n\n12 + 2 = 15.\n\n",
            "completion": f"{HOSTILE}\n\\boxed{{-1}}",
            "verdict": -1,
            "label": -1,
            "agrees": True,
        },
    ]
    # The last step has no reply; the user turn and the tool result are not labelable.
    assert tally == Counter({"critique_steps_without_reply": 1})


def test_agreeing_rows_keep_only_verdicts_that_match_the_label() -> None:
    run = judged_run()
    run[0].steps[1].label = -1  # people call the first step wrong; the judge approved it
    run[0].steps[4].judgment, run[0].steps[4].judge_verdict = "Fine.\n\\boxed{+1}", 1
    everything = list(records("critique", run, options(critiques="judge")))
    assert [(r["step_index"], r["agrees"]) for r in everything] == [
        (1, False),
        (2, True),
        (4, None),
    ]
    tally: Counter[str] = Counter()
    chosen = options(critiques="judge", critique_rows="agreeing")
    agreeing = [r for _, _, r in build_records("critique", run, chosen, tally=tally)]
    assert [r["step_index"] for r in agreeing] == [2]
    assert tally["critique_disagreeing"] == 1
    assert tally["critique_unlabelled"] == 1


def test_critique_format_needs_a_judge_and_other_choices_are_checked() -> None:
    with pytest.raises(ValueError, match="critique rows are a judge's critiques"):
        list(records("critique", judged_run(), options()))
    with pytest.raises(ValueError, match="critique_rows is 'some'"):
        options(critiques="judge", critique_rows="some")
    with pytest.raises(ValueError, match="decisive is 3"):
        options(decisive=3)


def test_decisive_failure_in_trajectory_level_records() -> None:
    run = judged_run(ParsedDecisive(agent="assistant", step_index=2, reason="adds wrong"))
    chosen = options(decisive="human:alice", stop_at_first_error=False)
    [trl] = records("trl-stepwise", run, chosen)
    assert trl["decisive"] == {
        "agent": "assistant",
        "step": 2,
        "position": 1,
        "reason": "adds wrong",
    }
    [prm] = records("prm800k", run, chosen)
    assert prm["decisive"]["position"] == 1
    [item] = records("processbench", run, chosen)
    assert item["decisive"]["position"] == 1 and item["label"] == 1


def test_decisive_position_is_null_when_the_record_does_not_hold_the_step() -> None:
    # The decisive step is the tool result (not a completion), then none at all.
    run = judged_run(ParsedDecisive(agent="", step_index=3))
    [trl] = records("trl-stepwise", run, options(decisive="model:judge"))
    assert trl["decisive"] == {"agent": "", "step": 3, "position": None, "reason": ""}
    [none] = records("trl-stepwise", judged_run(), options(decisive="model:judge"))
    assert none["decisive"] is None


def test_stepscope_writes_the_decisive_failure_and_reads_it_back(tmp_path: Path) -> None:
    decisive = ParsedDecisive(agent="assistant", step_index=2, reason=HOSTILE)
    run = judged_run(decisive)
    write_export(run, format_name="stepscope", options=options(), out_dir=tmp_path)
    line = (tmp_path / "stepscope.jsonl").read_text(encoding="utf-8")
    assert json.loads(line)["decisive"] == {"agent": "assistant", "step": 2, "reason": HOSTILE}
    [parsed] = parse_all("stepscope", tmp_path / "stepscope.jsonl")
    assert parsed.decisive == decisive
    assert parsed.decisive == to_parsed(run[0]).decisive


def test_parquet_takes_the_added_columns(tmp_path: Path) -> None:
    run = judged_run(ParsedDecisive(agent="assistant", step_index=2, reason=""))
    chosen = options(critiques="judge", decisive="human:alice")
    write_export(
        run, format_name="trl-stepwise", options=chosen, out_dir=tmp_path, container="parquet"
    )
    table = pq.read_table(tmp_path / "trl-stepwise.parquet")
    assert table.column_names == ["prompt", "completions", "labels", "critiques", "decisive"]
    assert table.to_pylist() == list(records("trl-stepwise", run, chosen))
    write_export(
        run, format_name="critique", options=chosen, out_dir=tmp_path / "c", container="parquet"
    )
    rows = pq.read_table(tmp_path / "c" / "critique.parquet").to_pylist()
    assert rows == list(records("critique", run, chosen))
