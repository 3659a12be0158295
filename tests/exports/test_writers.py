"""The export record builders (exports/writers), on hand-made trajectories with
hand-checked records, and re-imports of what they write through the importers."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from exports.writers import (
    ExportOptions,
    ExportSpan,
    ExportStep,
    ExportTrajectory,
    Neutral,
    first_error_position,
    label_to_bool,
    map_label,
    parse_neutral,
    records,
    task_groups,
    write_export,
)
from exports.writers.export import check_export, export_format
from exports.writers.records import to_parsed
from exports.writers.text import chat_messages, prompt_text, step_text
from trajectories.formats import parser_for
from trajectories.formats.base import ParsedStep, ParsedTrajectory, RecordError
from trajectories.hashing import prefix_hashes

REPO_ROOT = Path(__file__).resolve().parents[2]
REALDATA = REPO_ROOT.parent / "shared" / "realdata"
TASK = "What is 2 + 3 * 4?"


def step(content: str, label: int | None = None, **fields: Any) -> dict[str, Any]:
    """Keyword arguments for one ExportStep; index and prefix hash are filled in later."""
    role = fields.get("role", "assistant")
    return {
        "kind": "thought",
        "role": role,
        "content": content,
        "labelable": role == "assistant",
        "label": label,
        **fields,
    }


def trajectory(
    pk: int, steps: Iterable[dict[str, Any]], *, task: str = TASK, **fields: Any
) -> ExportTrajectory:
    """An ExportTrajectory whose prefix hashes are the importer's own (hashing.py)."""
    specs = list(steps)
    identity = ("kind", "role", "content", "labelable", "agent", "tool_name", "tool_args")
    parsed = [
        ParsedStep(**{key: value for key, value in spec.items() if key in identity})
        for spec in specs
    ]
    hashes = prefix_hashes(task, parsed)
    fields.setdefault("external_id", f"run-{pk}")
    return ExportTrajectory(
        id=pk,
        task=task,
        steps=[
            ExportStep(index=index, prefix_hash=hashes[index], **spec)
            for index, spec in enumerate(specs)
        ],
        **fields,
    )


def from_parsed(pk: int, parsed: ParsedTrajectory) -> ExportTrajectory:
    """What the Django side would read back after importing ``parsed``: every
    annotator's labels, and the first one as the resolved label."""
    per_step: list[list[tuple[str, int]]] = [[] for _ in parsed.steps]
    for label in parsed.labels:
        per_step[label.step_index].append((label.annotator, label.value))
    hashes = prefix_hashes(parsed.task, parsed.steps)
    return ExportTrajectory(
        id=pk,
        external_id=parsed.external_id,
        task=parsed.task,
        task_key=parsed.task_key,
        ground_truth=parsed.ground_truth,
        model_name=parsed.model_name,
        outcome_reward=parsed.outcome_reward,
        success=parsed.success,
        metadata=parsed.metadata,
        first_error_index=parsed.first_error_index,
        labels_by_annotator=per_step,
        steps=[
            ExportStep(
                index=index,
                kind=item.kind,
                role=item.role,
                agent=item.agent,
                content=item.content,
                tool_name=item.tool_name,
                tool_args=item.tool_args,
                metadata=item.metadata,
                labelable=item.labelable,
                prefix_hash=hashes[index],
                label=per_step[index][0][1] if per_step[index] else None,
            )
            for index, item in enumerate(parsed.steps)
        ],
    )


def parse_all(format_name: str, path: Path) -> list[ParsedTrajectory]:
    results = list(parser_for(format_name)(path))
    errors = [result for result in results if isinstance(result, RecordError)]
    assert errors == []
    return [result for result in results if isinstance(result, ParsedTrajectory)]


def options(neutral: str = "drop", **fields: Any) -> ExportOptions:
    return ExportOptions(neutral=Neutral(neutral), **fields)


def built(format_name: str, trajectories: Iterable[ExportTrajectory], **fields: Any) -> list[Any]:
    return list(records(format_name, trajectories, options(**fields)))


def comparable(parsed: ParsedTrajectory) -> ParsedTrajectory:
    # The Stepscope format has no keys for branch links (PRM800K alternatives) or the raw
    # source record; everything else must survive the round trip.
    return dataclasses.replace(
        parsed, raw=None, location="", parent_external_id="", branch_index=None
    )


# --- labels -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("neutral", "expected"),
    [("positive", 1), ("negative", -1), ("drop", None), ("keep", 0)],
)
def test_neutral_mapping_applies_only_to_neutral_labels(neutral: str, expected: int | None) -> None:
    mapping = parse_neutral(neutral)
    assert map_label(0, mapping) == expected
    assert map_label(1, mapping) == 1
    assert map_label(-1, mapping) == -1
    assert map_label(None, mapping) is None


def test_neutral_mapping_is_never_implicit() -> None:
    with pytest.raises(TypeError):
        ExportOptions()  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="expected one of positive, negative, drop, keep"):
        parse_neutral("ignore")
    assert ExportOptions(neutral="negative").neutral is Neutral.NEGATIVE  # type: ignore[arg-type]


def test_label_to_bool_refuses_an_unmapped_neutral() -> None:
    assert label_to_bool(1) is True
    assert label_to_bool(-1) is False
    with pytest.raises(ValueError, match="map neutral labels"):
        label_to_bool(0)
    with pytest.raises(ValueError, match="not one of -1, 0, 1"):
        map_label(2, Neutral.DROP)


def test_first_error_skips_inputs_and_follows_the_mapping() -> None:
    item = trajectory(1, [step(TASK, role="user"), step("a", 1), step("b", 0), step("c", -1)])
    assert first_error_position(item.steps, Neutral.POSITIVE) == 3
    assert first_error_position(item.steps, Neutral.NEGATIVE) == 2
    assert first_error_position(item.steps[:3], Neutral.DROP) is None


def test_export_options_reject_bad_choices() -> None:
    with pytest.raises(ValueError, match="min_margin"):
        options(min_margin=-1)
    with pytest.raises(ValueError, match="pair_value is 'mc'"):
        options(pair_value="mc")


# --- text -----------------------------------------------------------------------------


def test_step_text_adds_the_tool_call() -> None:
    call = trajectory(
        1,
        [
            step(
                "Let me count.",
                kind="tool_call",
                tool_name="python",
                tool_args={"code": "'strawberry'.count('r')", "a": 1},
            )
        ],
    ).steps[0]
    assert step_text(call) == (
        "Let me count.\n"
        '<tool_call>{"name": "python", "arguments": '
        '{"a": 1, "code": "\'strawberry\'.count(\'r\')"}}</tool_call>'
    )
    bare = dataclasses.replace(call, content="", tool_args=None)
    assert step_text(bare) == '<tool_call>{"name": "python", "arguments": {}}</tool_call>'


def test_prompt_text_marks_roles_and_does_not_repeat_the_task() -> None:
    item = trajectory(
        1,
        [
            step("You are careful.", role="system"),
            step(TASK, role="user"),
            step("3 * 4 = 12.", 1, agent="solver"),
            step("12", role="tool", kind="tool_result"),
            step("2 + 12 = 14.", 1),
        ],
    )
    assert prompt_text(TASK, item.steps[:4]) == (
        f"{TASK}\n\n[system] You are careful.\n\n[assistant/solver] 3 * 4 = 12.\n\n[tool] 12\n\n"
    )
    assert prompt_text(TASK, []) == f"{TASK}\n\n"


def test_chat_messages_follow_openai_shapes() -> None:
    item = trajectory(
        1,
        [
            step("Be brief.", role="system"),
            step(
                "",
                kind="tool_call",
                tool_name="calc",
                tool_args={"x": "3*4"},
                metadata={"tool_calls": [{"id": "c1", "name": "calc", "arguments": {"x": "3*4"}}]},
            ),
            step(
                "12",
                role="tool",
                kind="tool_result",
                tool_name="calc",
                metadata={"tool_call_id": "c1"},
            ),
            step("So 2 + 12 = 14."),
            step("The answer is 14.", kind="answer"),
        ],
    )
    assert chat_messages(TASK, item.steps) == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": TASK},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "calc", "arguments": '{"x": "3*4"}'},
                }
            ],
        },
        {"role": "tool", "content": "12", "tool_call_id": "c1", "name": "calc"},
        {"role": "assistant", "content": "So 2 + 12 = 14.\n\nThe answer is 14."},
    ]


# --- stepscope --------------------------------------------------------------------------


def tool_run() -> ExportTrajectory:
    return trajectory(
        7,
        [
            step("How many r's are in strawberry?", role="user", kind="message"),
            step(
                "Let me count with code.",
                1,
                kind="tool_call",
                agent="solver",
                tool_name="python",
                tool_args={"code": "'strawberry'.count('r')"},
                metadata={"latency_ms": 812},
            ),
            step("3", role="tool", kind="tool_result", tool_name="python", labelable=False),
            step("Il y a 3 « r ».", 1, kind="answer"),
        ],
        task="How many r's are in strawberry?",
        external_id="run-7",
        task_key="strawberry",
        ground_truth="3",
        model_name="gpt-4o",
        outcome_reward=1.0,
        success=True,
        metadata={"seed": 7},
        source_format="stepscope",
        first_error_index=-1,
        labels_by_annotator=[[], [("alice", 1), ("bob", 0)], [], [("import:stepscope", 1)]],
    )


def test_stepscope_record_is_the_importers_own_shape() -> None:
    [record] = built("stepscope", [tool_run()])
    assert list(record) == [
        "id",
        "task",
        "task_key",
        "ground_truth",
        "model",
        "outcome",
        "first_error_index",
        "decisive",
        "metadata",
        "training",
        "steps",
    ]
    assert record["decisive"] is None
    assert record["outcome"] == {"reward": 1.0, "success": True}
    assert record["steps"][1] == {
        "kind": "tool_call",
        "role": "assistant",
        "content": "Let me count with code.",
        "labelable": True,
        "agent": "solver",
        "tool_name": "python",
        "tool_args": {"code": "'strawberry'.count('r')"},
        "metadata": {"latency_ms": 812},
        "training": None,
        "labels": [{"annotator": "alice", "value": 1}, {"annotator": "bob", "value": 0}],
    }


def test_stepscope_export_reimports_to_the_same_trajectories(tmp_path: Path) -> None:
    items = [tool_run(), trajectory(8, [step("Only step.", -1)], labels_by_annotator=[[("x", -1)]])]
    write_export(items, format_name="stepscope", options=options(), out_dir=tmp_path)
    reparsed = parse_all("stepscope", tmp_path / "stepscope.jsonl")
    assert [comparable(parsed) for parsed in reparsed] == [to_parsed(item) for item in items]


@pytest.mark.parametrize(
    ("format_name", "relative"),
    [
        ("openai-messages", "tau_bench/gpt-4o-airline.json"),
        ("processbench", "processbench/gsm8k.json"),
        ("prm800k", "prm800k_sample/phase1_train_sample.jsonl"),
        ("swe-agent", "swe_agent/pydicom__pydicom-1458.traj"),
        ("inspect", "inspect_logs/2025-05-12T20-27-36-04-00_browser.json"),
    ],
)
def test_stepscope_round_trip_of_real_imports(
    tmp_path: Path, format_name: str, relative: str
) -> None:
    originals = parse_all(format_name, REALDATA / relative)
    items = [from_parsed(pk, parsed) for pk, parsed in enumerate(originals)]
    write_export(items, format_name="stepscope", options=options(), out_dir=tmp_path)
    reparsed = parse_all("stepscope", tmp_path / "stepscope.jsonl")
    assert [comparable(parsed) for parsed in reparsed] == [comparable(o) for o in originals]


def test_stepscope_refuses_what_it_cannot_carry() -> None:
    bad = dataclasses.replace(tool_run(), labels_by_annotator=[[("a", 1)], [], [], []])
    with pytest.raises(ValueError, match="step 0 is not labelable but has labels"):
        built("stepscope", [bad])


# --- trl-stepwise -----------------------------------------------------------------------


def test_trl_stepwise_ends_at_the_first_error() -> None:
    items = [
        trajectory(
            1,
            [
                step(TASK, role="user"),
                step("3 * 4 = 12.", 1),
                step("12 + 2 = 15.", -1),
                step("The answer is 15.", -1),
            ],
        ),
        trajectory(2, [step("3 * 4 = 12.", 1), step("2 + 12 = 14.", 1)]),
    ]
    assert built("trl-stepwise", items) == [
        {"prompt": TASK, "completions": ["3 * 4 = 12.", "12 + 2 = 15."], "labels": [True, False]},
        {"prompt": TASK, "completions": ["3 * 4 = 12.", "2 + 12 = 14."], "labels": [True, True]},
    ]
    assert built("trl-stepwise", items[:1], stop_at_first_error=False)[0]["labels"] == [
        True,
        False,
        False,
    ]


def test_trl_stepwise_ends_before_an_unlabelled_step() -> None:
    items = [
        trajectory(1, [step("a", 1), step("b", None), step("c", 1)]),
        trajectory(2, [step("a", 0), step("b", 1)]),
        trajectory(3, [step("x", None), step("y", 1)]),
    ]
    tally: Counter[str] = Counter()
    from exports.writers.export import build_records

    rows = [record for _, _, record in build_records("trl-stepwise", items, options(), tally=tally)]
    assert rows == [{"prompt": TASK, "completions": ["a"], "labels": [True]}]
    assert tally == Counter(cut_at_unlabelled_step=3, skipped_no_labelled_step=2)
    # With neutral as positive, trajectory 2's neutral first step is kept.
    assert built("trl-stepwise", items[1:2], neutral="positive") == [
        {"prompt": TASK, "completions": ["a", "b"], "labels": [True, True]}
    ]


def test_trl_stepwise_refuses_keep() -> None:
    with pytest.raises(ValueError, match="labels as booleans"):
        check_export(export_format("trl-stepwise"), options("keep"), "jsonl", False)


def test_trl_stepwise_reimports(tmp_path: Path) -> None:
    items = [trajectory(1, [step("a", 1), step("b", -1)]), trajectory(2, [step("c", 1)])]
    write_export(items, format_name="trl-stepwise", options=options(), out_dir=tmp_path)
    reparsed = parse_all("trl-stepwise", tmp_path / "trl-stepwise.jsonl")
    assert [[s.content for s in p.steps] for p in reparsed] == [["a", "b"], ["c"]]
    assert [[label.value for label in p.labels] for p in reparsed] == [[1, -1], [1]]
    assert [p.first_error_index for p in reparsed] == [1, -1]


# --- prm800k ------------------------------------------------------------------------------


def test_prm800k_record() -> None:
    item = trajectory(
        1,
        [
            step(TASK, role="user"),
            step("3 * 4 = 12.", 1),
            step("Then add 2.", None),
            step("12 + 2 = 15.", -1),
            step("The answer is 15.", -1),
        ],
        external_id="run-1",
        ground_truth="14",
    )
    assert built("prm800k", [item], labeler="human:majority") == [
        {
            "labeler": "human:majority",
            "timestamp": "run-1",
            "generation": None,
            "is_quality_control_question": False,
            "is_initial_screening_question": False,
            "question": {"problem": TASK, "ground_truth_answer": "14"},
            "label": {
                "steps": [
                    {
                        "completions": [{"text": text, "rating": rating, "flagged": None}],
                        "human_completion": None,
                        "chosen_completion": 0,
                    }
                    for text, rating in [
                        ("3 * 4 = 12.", 1),
                        ("Then add 2.", None),
                        ("12 + 2 = 15.", -1),
                    ]
                ],
                "total_time": None,
                "finish_reason": "found_error",
            },
        }
    ]


def test_prm800k_keeps_neutral_ratings_with_keep(tmp_path: Path) -> None:
    item = trajectory(1, [step("a", 1), step("b", 0), step("c", 1)])
    [record] = built("prm800k", [item], neutral="keep")
    assert [s["completions"][0]["rating"] for s in record["label"]["steps"]] == [1, 0, 1]
    assert record["label"]["finish_reason"] == "solution"
    write_export([item], format_name="prm800k", options=options("keep"), out_dir=tmp_path)
    [reparsed] = parse_all("prm800k", tmp_path / "prm800k.jsonl")
    assert reparsed.external_id == "stepscope:run-1"
    assert [s.content for s in reparsed.steps] == ["a", "b", "c"]
    assert [(label.step_index, label.value) for label in reparsed.labels] == [
        (0, 1),
        (1, 0),
        (2, 1),
    ]


# --- processbench -------------------------------------------------------------------------


def test_processbench_record_and_what_it_skips() -> None:
    items = [
        trajectory(
            1,
            [
                step(TASK, role="user"),
                step("3 * 4 = 12.", 1),
                step("12 + 2 = 15.", -1),
                step("The answer is 15."),
            ],
            model_name="qwen",
            success=False,
        ),
        trajectory(2, [step("a", 1), step("b", None), step("c", -1)], success=False),
        trajectory(3, [step("a", 1)], success=None),
        trajectory(4, [step("a", 1), step("b", 1)], success=True, model_name="qwen"),
    ]
    tally: Counter[str] = Counter()
    from exports.writers.export import build_records

    rows = [record for _, _, record in build_records("processbench", items, options(), tally=tally)]
    assert rows == [
        {
            "id": "run-1",
            "generator": "qwen",
            "problem": TASK,
            "steps": ["3 * 4 = 12.", "12 + 2 = 15.", "The answer is 15."],
            "final_answer_correct": False,
            "label": 1,
        },
        {
            "id": "run-4",
            "generator": "qwen",
            "problem": TASK,
            "steps": ["a", "b"],
            "final_answer_correct": True,
            "label": -1,
        },
    ]
    assert tally == Counter(skipped_not_fully_labelled=1, skipped_unknown_outcome=1)


def test_processbench_real_file_exports_back_to_itself(tmp_path: Path) -> None:
    source = REALDATA / "processbench" / "gsm8k.json"
    items = [from_parsed(pk, parsed) for pk, parsed in enumerate(parse_all("processbench", source))]
    write_export(items, format_name="processbench", options=options(), out_dir=tmp_path)
    exported = json.loads((tmp_path / "processbench.json").read_text(encoding="utf-8"))
    assert exported == json.loads(source.read_text(encoding="utf-8"))
    assert len(parse_all("processbench", tmp_path / "processbench.json")) == 400


# --- dpo ------------------------------------------------------------------------------------


def branching_rollouts() -> list[ExportTrajectory]:
    """Four rollouts of one task. A and B share their first two steps; C leaves them at
    step 1 with the right step; D goes wrong at step 0."""
    fix = "12 + 2 = 14."
    return [
        trajectory(
            1,
            [
                step("3 * 4 = 12.", 1),
                step("12 + 2 = 15.", -1, correction=fix),
                step("The answer is 15.", -1),
            ],
            task_key="t",
        ),
        trajectory(
            2,
            [
                step("3 * 4 = 12.", None),
                step("12 + 2 = 15.", -1, correction=fix),
                step("So it is 15.", -1),
            ],
            task_key="t",
        ),
        trajectory(
            3,
            [step("3 * 4 = 12.", 1), step("2 + 12 = 14.", 1), step("The answer is 14.", 1)],
            task_key="t",
        ),
        trajectory(
            4,
            [
                step("2 + 3 = 5.", -1, correction="Multiplication first: 3 * 4 = 12."),
                step("5 * 4 = 20.", -1),
            ],
            task_key="t",
        ),
    ]


def test_dpo_pairs_siblings_at_branch_points_and_corrections() -> None:
    root = f"{TASK}\n\n"
    after_first = f"{TASK}\n\n3 * 4 = 12.\n\n"
    tally: Counter[str] = Counter()
    from exports.writers.export import build_records

    rows = [r for _, _, r in build_records("dpo", branching_rollouts(), options(), tally=tally)]
    assert rows == [
        {"prompt": root, "chosen": "3 * 4 = 12.", "rejected": "2 + 3 = 5."},
        {"prompt": after_first, "chosen": "2 + 12 = 14.", "rejected": "12 + 2 = 15."},
        {"prompt": after_first, "chosen": "12 + 2 = 14.", "rejected": "12 + 2 = 15."},
        {"prompt": root, "chosen": "Multiplication first: 3 * 4 = 12.", "rejected": "2 + 3 = 5."},
    ]
    assert tally == Counter(sibling_pairs=2, correction_pairs=2)
    assert len(built("dpo", branching_rollouts(), corrections=False)) == 2
    # +1 against -1 differs by 2: a margin above that leaves only the corrections.
    assert len(built("dpo", branching_rollouts(), min_margin=2.5)) == 2


def test_dpo_margin_on_scores_and_neutral_labels() -> None:
    siblings = [
        trajectory(1, [step("x", 1, score=0.9)]),
        trajectory(2, [step("y", 0, score=0.5)]),
        trajectory(3, [step("z", -1, score=0.2)]),
    ]
    by_score = built("dpo", siblings, pair_value="score", min_margin=0.5)
    assert [(r["chosen"], r["rejected"]) for r in by_score] == [("x", "z")]
    with_keep = built("dpo", siblings, neutral="keep", min_margin=1.0)
    assert [(r["chosen"], r["rejected"]) for r in with_keep] == [("x", "y"), ("x", "z"), ("y", "z")]
    dropped = built("dpo", siblings, neutral="drop", min_margin=1.0)
    assert [(r["chosen"], r["rejected"]) for r in dropped] == [("x", "z")]


def test_dpo_needs_the_rollouts_of_a_task_together() -> None:
    items = [
        trajectory(1, [step("a", 1)], task_key="t1"),
        trajectory(2, [step("b", 1)], task_key="t2"),
        trajectory(3, [step("c", -1)], task_key="t1"),
    ]
    with pytest.raises(ValueError, match="task 't1' appears again"):
        built("dpo", items)
    # Formats that work per trajectory do not mind.
    assert len(built("kto", items)) == 3


# --- kto, sft -------------------------------------------------------------------------------


def test_kto_rows_per_labelled_step() -> None:
    item = trajectory(
        1,
        [
            step(TASK, role="user"),
            step("3 * 4 = 12.", 1),
            step("12", role="tool", kind="tool_result"),
            step("Hmm.", 0),
            step("12 + 2 = 15.", -1),
        ],
    )
    assert built("kto", [item]) == [
        {"prompt": f"{TASK}\n\n", "completion": "3 * 4 = 12.", "label": True},
        {
            "prompt": f"{TASK}\n\n3 * 4 = 12.\n\n[tool] 12\n\nHmm.\n\n",
            "completion": "12 + 2 = 15.",
            "label": False,
        },
    ]
    assert [row["label"] for row in built("kto", [item], neutral="negative")] == [
        True,
        False,
        False,
    ]


def test_sft_successful_trajectories() -> None:
    items = [
        trajectory(1, [step("3 * 4 = 12.", 1), step("2 + 12 = 14.")], success=True),
        trajectory(2, [step("3 * 4 = 12.", 1), step("12 + 2 = 15.", -1)], success=False),
        trajectory(3, [step("3 * 4 = 12.")], success=None),
    ]
    assert built("sft", items) == [
        {
            "messages": [
                {"role": "user", "content": TASK},
                {"role": "assistant", "content": "3 * 4 = 12.\n\n2 + 12 = 14."},
            ]
        }
    ]


def test_sft_prefixes_before_the_first_error() -> None:
    items = [
        trajectory(
            1,
            [
                step(TASK, role="user"),
                step("3 * 4 = 12.", 1),
                step("12", role="tool", kind="tool_result"),
                step("12 + 2 = 15.", -1),
                step("Done."),
            ],
            success=False,
        ),
        trajectory(2, [step("2 + 3 = 5.", -1)], success=False),
        trajectory(3, [step("3 * 4 = 12.")], success=False),
        trajectory(4, [step("3 * 4 = 12."), step("2 + 12 = 14.")], success=None),
    ]
    assert built("sft", items, sft="before_first_error") == [
        {
            "messages": [
                {"role": "user", "content": TASK},
                {"role": "assistant", "content": "3 * 4 = 12."},
            ]
        },
        {
            "messages": [
                {"role": "user", "content": TASK},
                {"role": "assistant", "content": "3 * 4 = 12.\n\n2 + 12 = 14."},
            ]
        },
    ]


# --- rl ---------------------------------------------------------------------------------------


def test_rl_rows_and_verl_prompts() -> None:
    items = [
        trajectory(
            11,
            [
                step("Be exact.", role="system"),
                step("3 * 4 = 12.", 1, score=0.8, credit=0.25),
                step("12 + 2 = 15.", 0, score=0.3, credit=float("nan")),
            ],
            task_key="t",
            ground_truth="14",
            outcome_reward=0.0,
            success=False,
            source_format="processbench",
        ),
        trajectory(12, [step("3 * 4 = 12.", 1)], task_key="t", ground_truth="14"),
    ]
    rows = built("rl", items, neutral="keep")
    assert rows[1] == {
        "trajectory_id": 11,
        "external_id": "run-11",
        "task_key": "t",
        "step_index": 1,
        "role": "assistant",
        "kind": "thought",
        "labelable": True,
        "step_text": "3 * 4 = 12.",
        "step_reward": 1.0,
        "credit": 0.25,
        "outcome_reward": 0.0,
        "success": False,
    }
    assert [(r["step_reward"], r["credit"]) for r in rows] == [
        (None, None),
        (1.0, 0.25),
        (0.0, None),
        (1.0, None),
    ]
    by_score = built("rl", items, step_reward="score")
    assert [r["step_reward"] for r in by_score] == [None, 0.8, 0.3, None]

    prompts = list(records("rl", items, options(), output="rl-prompts"))
    assert prompts == [
        {
            "data_source": "processbench",
            "prompt": [
                {"role": "system", "content": "Be exact."},
                {"role": "user", "content": TASK},
            ],
            "ability": "general",
            "reward_model": {"style": "rule", "ground_truth": "14"},
            "extra_info": {"split": "train", "index": 0, "task_key": "t"},
        }
    ]
    per_trajectory = list(
        records(
            "rl",
            items,
            options(prompts_per="trajectory", data_source="gsm8k", ability="math"),
            output="rl-prompts",
        )
    )
    assert [p["extra_info"]["index"] for p in per_trajectory] == [0, 1]
    assert per_trajectory[1]["prompt"] == [{"role": "user", "content": TASK}]
    assert {p["data_source"] for p in per_trajectory} == {"gsm8k"}


def test_task_groups_number_groups_per_split() -> None:
    items = [
        trajectory(1, [step("a")], task_key="t1"),
        trajectory(2, [step("a")], task_key="t1"),
        trajectory(3, [step("a")], task_key="t2"),
        trajectory(4, [step("a")], task=""),
    ]
    groups = list(task_groups(items))
    assert [(g.key, g.index, g.trajectory_offset, len(g.trajectories)) for g in groups] == [
        ("t1", 0, 0, 2),
        ("t2", 1, 2, 1),
        ("task-e3b0c44298fc1c14", 2, 3, 1),
    ]


# --- docs -------------------------------------------------------------------------------------


def documented_examples() -> dict[str, list[dict[str, Any]]]:
    """The JSON records under each format heading of the "Exports" section of
    docs/formats.md; ``rl``'s second block is ``rl-prompts``."""
    text = (REPO_ROOT / "docs" / "formats.md").read_text(encoding="utf-8")
    section = text.split("\n## Exports\n", 1)[1]
    decoder = json.JSONDecoder()
    found: dict[str, list[dict[str, Any]]] = {}
    for part in section.split("\n### ")[1:]:
        title = part.split("\n", 1)[0]
        if not (title.startswith("`") and title.endswith("`")):
            continue
        blocks = part.split("```json\n")[1:]
        for number, block in enumerate(blocks):
            output = title.strip("`") + ("-prompts" if number else "")
            body, position = block.split("```", 1)[0], 0
            while True:
                while position < len(body) and body[position].isspace():
                    position += 1
                if position == len(body):
                    break
                value, position = decoder.raw_decode(body, position)
                found.setdefault(output, []).append(value)
    return found


def documented_rollouts() -> list[ExportTrajectory]:
    common: dict[str, Any] = {
        "task_key": "arith-7",
        "ground_truth": "14",
        "model_name": "qwen2.5-7b",
        "source_format": "stepscope",
    }
    return [
        trajectory(
            41,
            [
                step("3 * 4 = 12.", 1, credit=0.12),
                step("2 + 12 = 14.", 1, credit=0.2),
                step("The answer is 14.", 1, kind="answer", credit=0.1),
            ],
            external_id="run-41",
            outcome_reward=1.0,
            success=True,
            first_error_index=-1,
            labels_by_annotator=[[("alice", 1)], [("alice", 1), ("bob", 1)], [("alice", 1)]],
            **common,
        ),
        trajectory(
            42,
            [
                step("3 * 4 = 12.", 1, credit=0.12),
                step(
                    "12 + 2 = 15.",
                    -1,
                    credit=-0.55,
                    correction="12 + 2 = 14.",
                    critique="12 + 2 is 14, not 15.",
                    judgment="12 + 2 is 14, not 15.\n\n\\boxed{-1}",
                    judge_verdict=-1,
                ),
                step("The answer is 15.", None, kind="answer", credit=-0.1),
            ],
            external_id="run-42",
            outcome_reward=0.0,
            success=False,
            first_error_index=1,
            labels_by_annotator=[[("alice", 1)], [("alice", -1)], []],
            spans=(
                ExportSpan("triage", 0, 0, "decisive progress", "alice"),
                ExportSpan("triage", 1, 2, "regression", "alice"),
            ),
            **common,
        ),
    ]


def test_docs_show_records_the_builders_make() -> None:
    examples = documented_examples()
    outputs = {
        "stepscope",
        "trl-stepwise",
        "prm800k",
        "processbench",
        "dpo",
        "kto",
        "sft",
        "critique",
        "rl",
        "rl-prompts",
        "spans",
    }
    assert set(examples) == outputs
    for output, documented in examples.items():
        format_name = "rl" if output.startswith("rl") else output
        chosen = options(critiques="judge") if output == "critique" else options()
        made = list(records(format_name, documented_rollouts(), chosen, output=output))
        for record in documented:
            assert record in made, output
