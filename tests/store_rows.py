"""Label-store rows for tests (generations and scores frames); light imports, so that writer
subprocesses start quickly."""

from __future__ import annotations

import polars as pl

from erag_dagster.core.hashing import sha256_text
from erag_dagster.labels.keys import gold_hash, score_key


def _generations(keys: list[str], answer: str = "a", fp: str = "f" * 64) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "generation_key": keys,
            "reader_fingerprint": [fp] * len(keys),
            "query_id": [f"q{k}" for k in keys],
            "question_hash": [sha256_text("question")] * len(keys),
            "doc_id": [f"d{k}" for k in keys],
            "text_hash": [sha256_text(k) for k in keys],
            "answer": [answer] * len(keys),
            "gen_seconds": [0.5] * len(keys),
        }
    )


def _scores(gen_keys: list[str], values: list[float], metric: str = "em") -> pl.DataFrame:
    gh = gold_hash(["Paris"])
    return pl.DataFrame(
        {
            "score_key": [score_key(k, gh, metric) for k in gen_keys],
            "generation_key": gen_keys,
            "gold_hash": [gh] * len(gen_keys),
            "metric": [metric] * len(gen_keys),
            "score": values,
            "gold_answers": [["Paris"]] * len(gen_keys),
        }
    )
