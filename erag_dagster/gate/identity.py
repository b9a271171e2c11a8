"""What a gate evaluation is, apart from the retriever: its identity, and the baseline file.

Two evaluations may be compared only when they measure the same thing, i.e. every field of
:class:`EvalIdentity` is equal; the retriever (what a gate compares) is kept beside it, in
:class:`RetrieverIdentity`, and may differ.

Baseline file (JSON, ``"format": "erag-gate-baseline/1"``): the identity, the retriever, the
dataset's query ids and every labelled run row (``query_id, doc_id, rank, label``); the metric
values are recomputed from those labels when it is read (one rule, in
:mod:`erag_dagster.metrics.list_metrics`), and the per-query and mean values written beside them
are for people reading the file. A file that is not JSON, not an object, of another format, or
lacks a field is one :class:`InputError` naming the file.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from erag_dagster.errors import InputError

BASELINE_FORMAT = "erag-gate-baseline/1"
LABEL_METHOD = "erag"
"""The only labelling method of the gate: the reader answers from each document alone (eRAG)."""


@dataclass(frozen=True)
class EvalIdentity:
    """Everything that decides a gate's numbers except the retriever.

    ``dataset_digest``: :func:`erag_dagster.inputs.dataset_digest` of the spec (its files'
    content and options); ``reader_fingerprint``: the reader's full fingerprint (model files,
    prompt, decoding); ``label_method``: :data:`LABEL_METHOD`; ``downstream_metric``: scores an
    answer against the gold answers (``em``, ``f1``, ...); ``metrics``: the list metrics, as
    given; ``k``: documents labelled and scored per query.
    """

    dataset_digest: str
    reader_fingerprint: str
    label_method: str
    downstream_metric: str
    metrics: tuple[str, ...]
    k: int

    def differences(self, other: EvalIdentity) -> list[str]:
        """``"field: mine vs other"`` for each field that differs (hashes cut to 12 digits)."""

        def shown(value: Any) -> str:
            if isinstance(value, tuple):
                return ",".join(value)
            text = str(value)
            return text[:12] if len(text) == 64 else text

        out = []
        for field in fields(self):
            mine, theirs = getattr(self, field.name), getattr(other, field.name)
            if mine != theirs:
                out.append(f"{field.name} {shown(mine)} vs {shown(theirs)}")
        return out


@dataclass(frozen=True)
class RetrieverIdentity:
    """What produced a run: ``kind`` ``registry`` (``name``, ``digest`` the registry entry's
    content hash), ``run_file`` (``name`` the path, ``digest`` the file's sha256) or whatever a
    baseline file recorded."""

    kind: str
    name: str
    digest: str

    @property
    def label(self) -> str:
        """A short name for reports (``bm25-1a2b3c4d``, ``runs/new.trec``)."""
        return f"{self.name}-{self.digest[:8]}" if self.kind == "registry" else self.name


def refuse_other_identity(
    baseline: EvalIdentity, candidate: EvalIdentity, baseline_ref: str, candidate_ref: str
) -> None:
    """One :class:`InputError` line naming every field that differs (nothing if none)."""
    differ = baseline.differences(candidate)
    if differ:
        raise InputError(
            f"cannot compare {candidate_ref} with baseline {baseline_ref}: they were evaluated "
            f"differently ({'; '.join(differ)}); only the retriever may differ"
        )


def write_baseline(path: str | Path, payload: dict[str, Any]) -> None:
    """Write a baseline file (``payload`` from :func:`baseline_payload`) atomically."""
    from erag_dagster.paths import atomic_write_text

    atomic_write_text(path, json.dumps(payload, indent=1, sort_keys=False) + "\n")


def baseline_payload(
    identity: EvalIdentity,
    retriever: RetrieverIdentity,
    dataset: str,
    reader_name: str,
    query_ids: list[str],
    labels: list[dict[str, Any]],
    per_query: dict[str, dict[str, float]],
    aggregate: dict[str, float],
) -> dict[str, Any]:
    """The JSON object of a baseline file (module docstring)."""
    return {
        "format": BASELINE_FORMAT,
        "identity": asdict(identity),
        "retriever": asdict(retriever),
        "dataset": dataset,
        "reader": reader_name,
        "query_ids": query_ids,
        "labels": labels,
        "aggregate": aggregate,
        "per_query": per_query,
    }


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise InputError(f"duplicate key {key!r}")
        out[key] = value
    return out


def read_baseline(path: str | Path) -> dict[str, Any]:
    """The baseline file at ``path``, checked: ``identity`` and ``retriever`` become
    :class:`EvalIdentity` / :class:`RetrieverIdentity`; the rest stays as stored."""
    file = Path(path)
    try:
        data = json.loads(file.read_text(encoding="utf-8"), object_pairs_hook=_reject_duplicates)
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}:{exc.lineno}: invalid JSON ({exc.msg})") from None
    except InputError as exc:
        raise InputError(f"{path}: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != BASELINE_FORMAT:
        raise InputError(
            f'{path}: not an erag-dagster gate baseline (expected "format": '
            f'"{BASELINE_FORMAT}"; write one with erag-dagster baseline)'
        )
    missing = [key for key in ("identity", "retriever", "query_ids", "labels") if key not in data]
    if missing:
        raise InputError(f"{path}: baseline lacks {', '.join(missing)}")
    try:
        raw = dict(data["identity"])
        identity = EvalIdentity(**{**raw, "metrics": tuple(raw["metrics"]), "k": int(raw["k"])})
        retriever = RetrieverIdentity(**data["retriever"])
    except (TypeError, ValueError, KeyError) as exc:
        raise InputError(f"{path}: baseline identity is malformed ({exc})") from None
    return {**data, "identity": identity, "retriever": retriever}
