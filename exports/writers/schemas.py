"""Parquet schemas, one per output that can be written as Parquet (no Django).

Column order is the builders' key order; output.ParquetRecordWriter checks each record
against it. Every field is nullable as Arrow fields are by default; the builders decide
what may be null (docs/formats.md, "Exports").
"""

from __future__ import annotations

import pyarrow as pa

_TEXT = pa.string()

TRL_STEPWISE = pa.schema(
    [("prompt", _TEXT), ("completions", pa.list_(_TEXT)), ("labels", pa.list_(pa.bool_()))]
)

# What optional options add to an output's records, in this order, after its own
# columns (export.output_schema): a judge's critiques beside trl-stepwise's labels, and
# the decisive failure of a trajectory-level record.
CRITIQUES = pa.field("critiques", pa.list_(_TEXT))
DECISIVE = pa.field(
    "decisive",
    pa.struct(
        [("agent", _TEXT), ("step", pa.int64()), ("position", pa.int64()), ("reason", _TEXT)]
    ),
)

CRITIQUE = pa.schema(
    [
        ("id", _TEXT),
        ("step_index", pa.int64()),
        ("prompt", _TEXT),
        ("completion", _TEXT),
        ("verdict", pa.int64()),
        ("label", pa.int64()),
        ("agrees", pa.bool_()),
    ]
)

PROCESSBENCH = pa.schema(
    [
        ("id", _TEXT),
        ("generator", _TEXT),
        ("problem", _TEXT),
        ("steps", pa.list_(_TEXT)),
        ("final_answer_correct", pa.bool_()),
        ("label", pa.int64()),
    ]
)

DPO = pa.schema([("prompt", _TEXT), ("chosen", _TEXT), ("rejected", _TEXT)])

KTO = pa.schema([("prompt", _TEXT), ("completion", _TEXT), ("label", pa.bool_())])

_TOOL_CALL = pa.struct(
    [
        ("id", _TEXT),
        ("type", _TEXT),
        ("function", pa.struct([("name", _TEXT), ("arguments", _TEXT)])),
    ]
)
_MESSAGE = pa.struct(
    [
        ("role", _TEXT),
        ("content", _TEXT),
        ("name", _TEXT),
        ("tool_calls", pa.list_(_TOOL_CALL)),
        ("tool_call_id", _TEXT),
    ]
)
SFT = pa.schema([("messages", pa.list_(_MESSAGE))])

RL_STEPS = pa.schema(
    [
        ("trajectory_id", pa.int64()),
        ("external_id", _TEXT),
        ("task_key", _TEXT),
        ("step_index", pa.int64()),
        ("role", _TEXT),
        ("kind", _TEXT),
        ("labelable", pa.bool_()),
        ("step_text", _TEXT),
        ("step_reward", pa.float64()),
        ("credit", pa.float64()),
        ("outcome_reward", pa.float64()),
        ("success", pa.bool_()),
    ]
)

RL_PROMPTS = pa.schema(
    [
        ("data_source", _TEXT),
        ("prompt", pa.list_(pa.struct([("role", _TEXT), ("content", _TEXT)]))),
        ("ability", _TEXT),
        ("reward_model", pa.struct([("style", _TEXT), ("ground_truth", _TEXT)])),
        (
            "extra_info",
            pa.struct([("split", _TEXT), ("index", pa.int64()), ("task_key", _TEXT)]),
        ),
    ]
)
