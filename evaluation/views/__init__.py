"""The evaluation pages, by topic: `compare`, `failures`, `alignment` (an LLM judge's prompt
versions against humans); `common` holds what they share."""
