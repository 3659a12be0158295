"""Export files: splits by task, deterministic and atomic writers (JSON Lines, gzip,
Parquet), the manifest, and loading every format with Hugging Face ``datasets``."""

from __future__ import annotations

import gzip
import hashlib
import json
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from exports.writers import (
    FORMATS,
    ExportSpan,
    ExportTrajectory,
    SplitSpecError,
    build_manifest,
    output,
    parse_split_spec,
    records,
    schemas,
    split_for,
    write_export,
    write_manifest,
    write_records,
)
from exports.writers.output import ParquetRecordWriter, sha256_of
from tests.exports.test_writers import options, step, trajectory

REPO_ROOT = Path(__file__).resolve().parents[2]


def corpus(tasks: int = 6) -> list[ExportTrajectory]:
    """Rollouts that give records in every format: per task, a right one with a tool call
    and a user turn, and a wrong one that leaves it at step 2, with scores, credits and a
    correction. Text is not all ASCII on purpose."""
    items = []
    for number in range(tasks):
        task = f"Tâche {number}: what is 2 + 3 * 4?"
        shared = [
            step(task, role="user", kind="message"),
            step(
                "3 * 4 = 12.",
                1,
                score=0.9,
                credit=0.1,
                critique="Right: 3 * 4 is 12.",
                judgment="Right: 3 * 4 is 12.\n\\boxed{+1}",
                judge_verdict=1,
            ),
            step(
                "Check it.",
                1,
                kind="tool_call",
                tool_name="calc",
                tool_args={"x": "3*4"},
                score=0.8,
                credit=0.0,
            ),
            step("12", role="tool", kind="tool_result", tool_name="calc"),
        ]
        items.append(
            trajectory(
                2 * number,
                [*shared, step("2 + 12 = 14 ✓.", 1, score=0.9, credit=0.3)],
                task=task,
                task_key=f"task-{number}",
                ground_truth="14",
                outcome_reward=1.0,
                success=True,
                model_name="tiny",
                source_format="stepscope",
                labels_by_annotator=[[], [("alice", 1)], [("alice", 1), ("bob", 0)], [], []],
            )
        )
        items.append(
            trajectory(
                2 * number + 1,
                [
                    *shared,
                    step(
                        "12 + 2 = 15.",
                        -1,
                        score=0.2,
                        credit=-0.6,
                        correction="12 + 2 = 14.",
                        critique="<b>Wrong</b>: 12 + 2 is 14.",
                        judgment="<b>Wrong</b>: 12 + 2 is 14.\n\\boxed{-1}",
                        judge_verdict=-1,
                    ),
                    step("The answer is 15.", 0, score=0.1),
                ],
                task=task,
                task_key=f"task-{number}",
                ground_truth="14",
                outcome_reward=0.0,
                success=False,
                model_name="tiny",
                source_format="stepscope",
                # Span labels (only the ``spans`` format reads them): a run of
                # exploration, and the regression inside and after it.
                spans=(
                    ExportSpan("triage", 1, 3, "useful exploration", "alice"),
                    ExportSpan("triage", 3, 5, "regression", "alice"),
                ),
            )
        )
    return items


# --- splits -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "split spec is empty"),
        ("train", "expected name=share"),
        ("=0.5,test=0.5", "expected name=share"),
        ("train=abc", "share 'abc' is not a number"),
        ("train=0.9,test=0.2", "add up to 1.1; they must add up to 1"),
        ("train=0.5,train=0.5", "'train' appears twice"),
        ("tr ain=1", "use letters, digits"),
        ("train=0,test=1", "must be above 0"),
        ("train=nan", "must be above 0"),
    ],
)
def test_split_spec_errors_say_what_is_wrong(spec: str, message: str) -> None:
    with pytest.raises(SplitSpecError, match=message):
        parse_split_spec(spec)


def test_split_assignment_is_fixed_for_a_seed() -> None:
    spec = parse_split_spec(" train = 0.5, test=0.3 ,dev=0.2")
    assert str(spec) == "train=0.5,test=0.3,dev=0.2"
    keys = [f"task-{number}" for number in range(8)]
    # Hard-coded: the assignment depends on nothing but the key and the seed (SHA-256),
    # so it must not change between runs, machines or releases.
    assert [split_for(key, spec, 13) for key in keys] == [
        "train",
        "train",
        "test",
        "test",
        "dev",
        "train",
        "train",
        "train",
    ]
    assert [split_for(key, spec, 14) for key in keys] == [
        "test",
        "dev",
        "train",
        "train",
        "test",
        "train",
        "train",
        "train",
    ]


def test_splits_never_share_a_task(tmp_path: Path) -> None:
    items = corpus(tasks=200)
    spec = parse_split_spec("train=0.9,test=0.1")
    result = write_export(
        items,
        format_name="rl",
        options=options(),
        out_dir=tmp_path,
        splits=spec,
        seed=7,
        container="jsonl",
    )
    keys: dict[str, set[str]] = {}
    for split in ("train", "test"):
        lines = (tmp_path / f"rl-{split}.jsonl").read_text(encoding="utf-8").splitlines()
        keys[split] = {json.loads(line)["task_key"] for line in lines}
    assert keys["train"] and keys["test"]
    assert not keys["train"] & keys["test"]
    assert len(keys["train"]) + len(keys["test"]) == 200
    assert 5 <= len(keys["test"]) <= 40
    sizes = result.split_sizes
    assert sizes["train"]["tasks"] + sizes["test"]["tasks"] == 200
    assert sizes["test"]["trajectories"] == 2 * len(keys["test"])
    for split in ("train", "test"):
        assert all(split_for(key, spec, 7) == split for key in keys[split])

    again = write_export(
        items,
        format_name="rl",
        options=options(),
        out_dir=tmp_path / "again",
        splits=spec,
        seed=7,
        container="jsonl",
    )
    assert [f.sha256 for f in again.files] == [f.sha256 for f in result.files]


# --- determinism --------------------------------------------------------------------------


# What a format needs beyond the defaults to give records from the corpus.
FORMAT_OPTIONS: dict[str, dict[str, Any]] = {"critique": {"critiques": "judge"}}


def export_twice(tmp_path: Path, format_name: str, **arguments: Any) -> tuple[str, str, Path]:
    shas = []
    for run in ("one", "two"):
        result = write_export(
            corpus(),
            format_name=format_name,
            options=options(**FORMAT_OPTIONS.get(format_name, {})),
            out_dir=tmp_path / run,
            splits=parse_split_spec("train=0.5,test=0.5"),
            seed=3,
            **arguments,
        )
        shas.append(hashlib.sha256(b"".join(f.sha256.encode() for f in result.files)).hexdigest())
        assert all(f.sha256 == sha256_of(f.path) for f in result.files)
    return shas[0], shas[1], tmp_path / "one"


@pytest.mark.parametrize("format_name", sorted(FORMATS))
def test_jsonl_export_twice_gives_the_same_bytes(tmp_path: Path, format_name: str) -> None:
    first, second, _ = export_twice(tmp_path, format_name, container="jsonl")
    assert first == second


def test_jsonl_bytes_are_compact_utf8_lines(tmp_path: Path) -> None:
    item = trajectory(1, [step("Ça fait 12.", 1)], task="Combien ?")
    written = write_export([item], format_name="kto", options=options(), out_dir=tmp_path)
    assert (tmp_path / "kto.jsonl").read_bytes() == (
        '{"prompt":"Combien ?\\n\\n","completion":"Ça fait 12.","label":true}\n'.encode()
    )
    assert written.files[0].rows == 1


def test_gzip_export_is_deterministic(tmp_path: Path) -> None:
    first, second, directory = export_twice(tmp_path, "trl-stepwise", compress=True)
    assert first == second
    data = (directory / "trl-stepwise-train.jsonl.gz").read_bytes()
    assert data[4:8] == b"\x00\x00\x00\x00"  # mtime 0
    assert data[3] & 0x08 == 0  # no file name in the header
    write_export(
        corpus(),
        format_name="trl-stepwise",
        options=options(),
        out_dir=tmp_path / "p",
        splits=parse_split_spec("train=0.5,test=0.5"),
        seed=3,
    )
    plain = (tmp_path / "p" / "trl-stepwise-train.jsonl").read_bytes()
    assert gzip.decompress(data) == plain


@pytest.mark.parametrize("format_name", ["trl-stepwise", "dpo", "kto", "sft", "rl", "processbench"])
def test_parquet_export_twice_gives_the_same_bytes(tmp_path: Path, format_name: str) -> None:
    first, second, _ = export_twice(tmp_path, format_name, container="parquet")
    assert first == second


PARQUET_SCRIPT = """
import sys
from pathlib import Path
from exports.writers import schemas, write_records
rows = [{"prompt": f"p{i} é", "completions": [f"s{i}", "t"], "labels": [True, i % 2 == 0]}
        for i in range(25)]
print(write_records(Path(sys.argv[1]), rows, "parquet", schema=schemas.TRL_STEPWISE,
                    row_group_size=10).sha256)
"""


def test_parquet_bytes_match_across_processes(tmp_path: Path) -> None:
    shas = []
    for name in ("a.parquet", "b.parquet"):
        completed = subprocess.run(
            [sys.executable, "-c", PARQUET_SCRIPT, str(tmp_path / name)],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        shas.append(completed.stdout.strip())
    assert shas[0] == shas[1] == sha256_of(tmp_path / "a.parquet")
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()
    metadata = pq.ParquetFile(tmp_path / "a.parquet").metadata
    assert (metadata.num_rows, metadata.num_row_groups) == (25, 3)


def test_parquet_row_groups_close_on_text_size_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(output, "ROW_GROUP_BYTES", 1000)
    rows = [{"prompt": "p" * 400, "chosen": "c", "rejected": "r"} for _ in range(10)]
    written = write_records(tmp_path / "long.parquet", rows, "parquet", schema=schemas.DPO)
    metadata = pq.ParquetFile(written.path).metadata
    assert (metadata.num_rows, metadata.num_row_groups) == (10, 4)


@pytest.mark.parametrize(
    ("row_group_size", "group_bytes"), [(10_000, None), (777, None), (10_000, 200_000)]
)
def test_rows_given_as_tables_cut_into_the_same_row_groups_and_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, row_group_size: int, group_bytes: int | None
) -> None:
    """write_table (the columnar rl export) against write, one dict at a time, on the
    same rows handed over in tables of random sizes: same row groups, same bytes."""
    if group_bytes is not None:
        monkeypatch.setattr(output, "ROW_GROUP_BYTES", group_bytes)
    rng = random.Random(row_group_size)
    rows = [
        {
            "trajectory_id": number // 7,
            "external_id": f"e{number // 7}",
            "task_key": f"k{number // 50}",
            "step_index": number % 7,
            "role": "assistant",
            "kind": "thought",
            "labelable": number % 3 > 0,
            "step_text": "é x\n" * rng.randint(0, 300),
            "step_reward": rng.choice([None, 1.0, -1.0]),
            "credit": rng.random(),
            "outcome_reward": None,
            "success": rng.choice([None, True, False]),
        }
        for number in range(25_000)
    ]
    one_by_one = ParquetRecordWriter(
        tmp_path / "a.parquet", schemas.RL_STEPS, row_group_size=row_group_size
    )
    for row in rows:
        one_by_one.write(row)
    expected = one_by_one.commit()
    tables = ParquetRecordWriter(
        tmp_path / "b.parquet", schemas.RL_STEPS, row_group_size=row_group_size
    )
    start = 0
    while start < len(rows):
        size = rng.randint(1, 6000)
        tables.write_table(
            pa.Table.from_pylist(rows[start : start + size], schema=schemas.RL_STEPS)
        )
        start += size
    written = tables.commit()
    assert written.rows == expected.rows == len(rows)
    assert written.sha256 == expected.sha256
    groups = pq.ParquetFile(written.path).metadata.num_row_groups
    assert groups > len(rows) // row_group_size


# --- atomic writes ------------------------------------------------------------------------


def failing(items: list[ExportTrajectory], after: int) -> Iterator[ExportTrajectory]:
    yield from items[:after]
    raise RuntimeError("database went away")


@pytest.mark.parametrize(("format_name", "container"), [("rl", "parquet"), ("kto", "jsonl")])
def test_a_failed_export_leaves_no_file(tmp_path: Path, format_name: str, container: str) -> None:
    spec = parse_split_spec("train=0.5,test=0.5")
    done = write_export(
        corpus(),
        format_name=format_name,
        options=options(),
        out_dir=tmp_path,
        splits=spec,
        container=container,  # type: ignore[arg-type]
    )
    before = {path.name: sha256_of(path) for path in tmp_path.iterdir()}
    assert len(before) == len(done.files)
    with pytest.raises(RuntimeError, match="database went away"):
        write_export(
            failing(corpus(tasks=40), 50),
            format_name=format_name,
            options=options("positive"),
            out_dir=tmp_path,
            splits=spec,
            container=container,  # type: ignore[arg-type]
        )
    # The earlier, complete export is untouched and no temporary file is left.
    assert {path.name: sha256_of(path) for path in tmp_path.iterdir()} == before

    fresh = tmp_path / "fresh"
    with pytest.raises(RuntimeError):
        write_export(
            failing(corpus(), 3),
            format_name=format_name,
            options=options(),
            out_dir=fresh,
            container=container,  # type: ignore[arg-type]
        )
    assert list(fresh.iterdir()) == []


def test_a_record_that_is_not_json_leaves_no_file(tmp_path: Path) -> None:
    rows = [{"value": 1.0}, {"value": float("nan")}]
    with pytest.raises(ValueError, match="not valid JSON"):
        write_records(tmp_path / "x.jsonl", rows, "jsonl")
    with pytest.raises(ValueError, match="do not match the schema's columns"):
        write_records(tmp_path / "x.parquet", [{"prompt": "p"}], "parquet", schema=schemas.DPO)
    assert list(tmp_path.iterdir()) == []


def test_containers_are_checked_before_anything_is_written(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="stepscope cannot be written as parquet"):
        write_export(
            corpus(),
            format_name="stepscope",
            options=options(),
            out_dir=tmp_path,
            container="parquet",
        )
    with pytest.raises(ValueError, match="gzip applies to JSON only"):
        write_export(corpus(), format_name="rl", options=options(), out_dir=tmp_path, compress=True)
    with pytest.raises(ValueError, match="unknown export format 'csv'"):
        write_export(corpus(), format_name="csv", options=options(), out_dir=tmp_path)
    assert not tmp_path.exists() or list(tmp_path.iterdir()) == []


# --- manifest -----------------------------------------------------------------------------


def test_manifest_describes_the_export(tmp_path: Path) -> None:
    result = write_export(
        corpus(),
        format_name="trl-stepwise",
        options=options("negative"),
        out_dir=tmp_path,
        splits=parse_split_spec("train=0.5,test=0.5"),
        seed=3,
        compress=True,
    )
    manifest = build_manifest(
        result,
        selection={"name": "hard-ones", "filters": {"outcome": "failed"}},
        label_source="human:majority",
        schema_revision=3,
        scorer_revisions={"qwen-prm": "rev-abc"},
        attribution_revisions={"mc-1": {"method": "mc", "rollouts": 8}},
    )
    written = write_manifest(tmp_path, manifest)
    text = (tmp_path / "manifest.json").read_text(encoding="utf-8")
    assert json.loads(text) == manifest
    assert text == json.dumps(manifest, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    assert written.sha256 == sha256_of(tmp_path / "manifest.json")

    assert manifest["format"] == "trl-stepwise"
    assert manifest["compression"] == "gzip"
    assert manifest["label_source"] == "human:majority"
    assert manifest["neutral"] == manifest["options"]["neutral"] == "negative"
    assert manifest["selection"]["name"] == "hard-ones"
    assert manifest["revisions"] == {
        "label_schema": 3,
        "scorers": {"qwen-prm": "rev-abc"},
        "attribution": {"mc-1": {"method": "mc", "rollouts": 8}},
    }
    assert manifest["annotators"] == ["alice", "bob"]
    assert manifest["counts"]["trajectories"] == 12
    assert manifest["counts"]["tasks"] == 6
    assert manifest["counts"]["records"] == {"trl-stepwise": 12}
    assert manifest["label_distribution"]["resolved"] == {"1": 30, "-1": 6, "0": 6}
    assert manifest["label_distribution"]["after_neutral_mapping"] == {"1": 30, "-1": 12}
    sizes = manifest["split"]["sizes"]
    assert manifest["split"]["spec"] == "train=0.5,test=0.5"
    assert sizes["train"]["tasks"] + sizes["test"]["tasks"] == 6
    assert set(manifest["files"]) == {"trl-stepwise-train.jsonl.gz", "trl-stepwise-test.jsonl.gz"}
    for name, entry in manifest["files"].items():
        assert entry["sha256"] == sha256_of(tmp_path / name)
    assert "zlib" in manifest["writer"]

    again = build_manifest(
        write_export(
            corpus(),
            format_name="trl-stepwise",
            options=options("negative"),
            out_dir=tmp_path / "again",
            splits=parse_split_spec("train=0.5,test=0.5"),
            seed=3,
            compress=True,
        ),
        selection={"name": "hard-ones", "filters": {"outcome": "failed"}},
        label_source="human:majority",
        schema_revision=3,
        scorer_revisions={"qwen-prm": "rev-abc"},
        attribution_revisions={"mc-1": {"method": "mc", "rollouts": 8}},
    )
    assert write_manifest(tmp_path / "again", again).sha256 == written.sha256


# --- datasets -----------------------------------------------------------------------------

V = datasets.Value
L = datasets.List

FLAT_FEATURES: dict[str, dict[str, Any]] = {
    "trl-stepwise": {"prompt": V("string"), "completions": L(V("string")), "labels": L(V("bool"))},
    "processbench": {
        "id": V("string"),
        "generator": V("string"),
        "problem": V("string"),
        "steps": L(V("string")),
        "final_answer_correct": V("bool"),
        "label": V("int64"),
    },
    "dpo": {"prompt": V("string"), "chosen": V("string"), "rejected": V("string")},
    "critique": {
        "id": V("string"),
        "step_index": V("int64"),
        "prompt": V("string"),
        "completion": V("string"),
        "verdict": V("int64"),
        "label": V("int64"),
        "agrees": V("bool"),
    },
    "kto": {"prompt": V("string"), "completion": V("string"), "label": V("bool")},
    "rl": {
        "trajectory_id": V("int64"),
        "external_id": V("string"),
        "task_key": V("string"),
        "step_index": V("int64"),
        "role": V("string"),
        "kind": V("string"),
        "labelable": V("bool"),
        "step_text": V("string"),
        "step_reward": V("float64"),
        "credit": V("float64"),
        "outcome_reward": V("float64"),
        "success": V("bool"),
    },
}


def load(path: Path, cache: Path) -> datasets.Dataset:
    builder = "parquet" if path.suffix == ".parquet" else "json"
    dataset = datasets.load_dataset(
        builder, data_files=str(path), split="train", cache_dir=str(cache)
    )
    assert isinstance(dataset, datasets.Dataset)
    return dataset


LOADABLE = [
    (format_name, container, compress)
    for format_name, export in sorted(FORMATS.items())
    for container in export.containers
    for compress in ((False, True) if container == "jsonl" else (False,))
]


@pytest.mark.parametrize(("format_name", "container", "compress"), LOADABLE)
def test_every_format_loads_with_datasets(
    tmp_path: Path, format_name: str, container: str, compress: bool
) -> None:
    chosen = options(**FORMAT_OPTIONS.get(format_name, {}))
    result = write_export(
        corpus(),
        format_name=format_name,
        options=chosen,
        out_dir=tmp_path / "out",
        container=container,  # type: ignore[arg-type]
        compress=compress,
    )
    for file in result.files:
        dataset = load(file.path, tmp_path / "hf")
        expected = list(records(format_name, corpus(), chosen, output=file.output))
        assert dataset.num_rows == file.rows == len(expected) > 0
        assert dataset.column_names == list(expected[0])
        if file.output in FLAT_FEATURES:
            assert dataset.features == datasets.Features(FLAT_FEATURES[file.output])
            assert dataset.to_list() == expected
        else:
            check_nested(file.output, dataset)


def check_nested(output: str, dataset: datasets.Dataset) -> None:
    features = dataset.features
    row = dataset[0]
    if output == "sft":
        message = features["messages"].feature
        if isinstance(message, datasets.Json):
            # JSON Lines: messages differ in their keys (only a tool call has tool_calls),
            # which datasets keeps as JSON objects, exactly as written.
            assert dataset.to_list() == list(records("sft", corpus(), options()))
        else:
            assert message["role"] == message["content"] == V("string")
            assert message["tool_calls"].feature["function"]["arguments"] == V("string")
            assert row["messages"][0] == {
                **dict.fromkeys(message),
                "role": "user",
                "content": "Tâche 0: what is 2 + 3 * 4?",
            }
    elif output == "rl-prompts":
        assert features["prompt"] == L({"role": V("string"), "content": V("string")})
        assert features["reward_model"]["ground_truth"] == V("string")
        assert features["extra_info"]["index"] == V("int64")
        assert row["reward_model"] == {"style": "rule", "ground_truth": "14"}
    elif output == "prm800k":
        step_feature = features["label"]["steps"].feature
        assert step_feature["completions"].feature["rating"] == V("int64")
        assert step_feature["chosen_completion"] == V("int64")
        assert features["question"]["problem"] == V("string")
    elif output == "stepscope":
        assert features["steps"].feature["content"] == V("string")
        assert features["outcome"]["reward"] == V("float64")
        assert row["id"] == "run-0"
    elif output == "spans":
        assert features["segments"].feature["start"] == V("int64")
        assert row["id"] == "run-1"
        assert row["step_values"]["triage"]["alice"] == [
            [],
            ["useful exploration"],
            ["useful exploration"],
            ["regression", "useful exploration"],
            ["regression"],
            ["regression"],
        ]
    else:  # pragma: no cover - every output is checked above
        raise AssertionError(output)


def test_loaded_rows_match_the_records_for_parquet(tmp_path: Path) -> None:
    result = write_export(corpus(), format_name="rl", options=options(), out_dir=tmp_path)
    prompts = load(tmp_path / "rl-prompts.parquet", tmp_path / "hf")
    assert prompts.to_list() == list(records("rl", corpus(), options(), output="rl-prompts"))
    assert result.files[0].rows == sum(len(item.steps) for item in corpus())
