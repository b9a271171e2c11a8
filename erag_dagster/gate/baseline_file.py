"""The gate's baseline file: written by ``erag-dagster baseline`` (or ``compare
--save-candidate``), read back as a ref, and never trusted blindly.

Format (JSON object, ``"format": "erag-gate-baseline/2"``)::

    identity     EvalIdentity fields (dataset_digest, reader_fingerprint, label_method,
                 downstream_metric, metrics, k)
    retriever    {kind, name, digest}
    dataset      the dataset spec it was evaluated on (a string)
    reader       the reader's name (a string)
    query_ids    every query of the dataset, unique strings, at least one
    labels       one object per labelled run row: query_id, doc_id, rank (1..k), label (a
                 number in [0, 1]), answer_key (the label store's generation key of the
                 reader's answer: :func:`erag_dagster.labels.keys.generation_key`)
    digest       sha256 of the canonical JSON of [format, identity, retriever, query_ids,
                 labels sorted by (query_id, rank)] (:func:`baseline_digest`)
    aggregate, per_query   the metric values, for people reading the file (recomputed on read)

Reading (:func:`read_baseline`) goes through the one input rule
(:func:`erag_dagster.core.input_files.load_json`: a regular file within ``ERAG_MAX_INPUT_BYTES``, a
BOM stripped, duplicate keys and deep nesting refused) and checks every field: its type, the
label rows (each query in ``query_ids``, ranks ``1..n`` without gaps or repeats and at most
``k``, a doc once per query, labels finite in [0, 1], an answer key of 64 hex digits), the
metric names (the grammar of :mod:`erag_dagster.metrics.names`), no field outside
:data:`TOP_FIELDS`, and the digest. Anything else is ONE
:class:`~erag_dagster.core.errors.InputError` naming the file and the field. A file of format 1
(no answer keys, no digest) is refused: it cannot be verified; write
it again. The labels are then checked against the label store and the dataset by
:mod:`erag_dagster.gate.verify`.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict
from pathlib import Path
from typing import Any

from erag_dagster.core.errors import InputError
from erag_dagster.core.hashing import sha256_json
from erag_dagster.gate.escape import shown
from erag_dagster.gate.identity import EvalIdentity, RetrieverIdentity
from erag_dagster.metrics.names import parse_metric_names

BASELINE_FORMAT = "erag-gate-baseline/2"
LABEL_FIELDS = ("query_id", "doc_id", "rank", "label", "answer_key")
TOP_FIELDS = ("format", "identity", "retriever", "dataset", "reader", "query_ids", "labels",
              "digest", "aggregate", "per_query")  # fmt: skip
"""Every field a baseline file may hold (module docstring); any other is refused."""
_HEX64 = re.compile(r"[0-9a-f]{64}")


def baseline_digest(
    identity: dict[str, Any],
    retriever: dict[str, Any],
    query_ids: list[str],
    labels: list[dict[str, Any]],
) -> str:
    """The digest of a baseline's content (module docstring); ``labels`` in any order."""
    rows = sorted(
        ([row[f] for f in LABEL_FIELDS] for row in labels), key=lambda r: (r[0], r[2], r[1])
    )
    return sha256_json([BASELINE_FORMAT, identity, retriever, list(query_ids), rows])


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
    """The JSON object of a baseline file (module docstring); ``labels`` rows need
    :data:`LABEL_FIELDS`."""
    rows = [{f: row[f] for f in LABEL_FIELDS} for row in labels]
    ident, retr = _identity_json(identity), asdict(retriever)
    return {
        "format": BASELINE_FORMAT,
        "identity": ident,
        "retriever": retr,
        "dataset": dataset,
        "reader": reader_name,
        "query_ids": list(query_ids),
        "labels": rows,
        "digest": baseline_digest(ident, retr, list(query_ids), rows),
        "aggregate": aggregate,
        "per_query": per_query,
    }


def _identity_json(identity: EvalIdentity) -> dict[str, Any]:
    data = asdict(identity)
    data["metrics"] = list(identity.metrics)
    return data


# -- reading ---------------------------------------------------------------------------------


def _fail(path: str | Path, message: str) -> InputError:
    return InputError(f"{shown(path)}: {message}")


def _string(value: Any, path: str | Path, field: str) -> str:
    if not isinstance(value, str):
        raise _fail(path, f"{field} must be a string, got {type(value).__name__}")
    return value


def _object(value: Any, path: str | Path, field: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _fail(path, f"{field} must be an object, got {type(value).__name__}")
    return value


def _identity(data: dict[str, Any], path: str | Path) -> EvalIdentity:
    raw = _object(data["identity"], path, "identity")
    names = ("dataset_digest", "reader_fingerprint", "label_method", "downstream_metric")
    expected = {*names, "metrics", "k"}
    if set(raw) != expected:
        odd = sorted(set(raw) ^ expected)
        raise _fail(path, f"identity has other fields than expected ({', '.join(odd)})")
    values = {name: _string(raw[name], path, f"identity.{name}") for name in names}
    metrics = raw["metrics"]
    if (
        not isinstance(metrics, list)
        or not metrics
        or not all(isinstance(m, str) and m for m in metrics)
    ):
        raise _fail(path, "identity.metrics must be a non-empty list of metric names")
    try:  # the metric grammar every front door reads names with, the file named
        parse_metric_names(metrics)
    except InputError as exc:
        raise _fail(path, f"identity.metrics: {exc}") from None
    k = raw["k"]
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise _fail(path, f"identity.k must be an integer >= 1, got {k!r}")
    return EvalIdentity(**values, metrics=tuple(metrics), k=k)


def _retriever(data: dict[str, Any], path: str | Path) -> RetrieverIdentity:
    raw = _object(data["retriever"], path, "retriever")
    if set(raw) != {"kind", "name", "digest"}:
        raise _fail(path, "retriever must hold exactly kind, name and digest")
    return RetrieverIdentity(
        *(_string(raw[f], path, f"retriever.{f}") for f in ("kind", "name", "digest"))
    )


def _query_ids(data: dict[str, Any], path: str | Path) -> list[str]:
    ids = data["query_ids"]
    if not isinstance(ids, list) or not ids:
        raise _fail(path, "query_ids must be a non-empty list of query ids")
    if not all(isinstance(q, str) and q for q in ids):
        raise _fail(path, "query_ids must hold non-empty strings only")
    if len(set(ids)) != len(ids):
        twice = next(q for i, q in enumerate(ids) if q in ids[:i])
        raise _fail(path, f"query_ids holds {shown(twice)!r} twice")
    return ids


def _label_rows(data: dict[str, Any], path: str | Path, ids: list[str], k: int) -> list[dict]:
    """The label rows, checked (module docstring)."""
    rows = data["labels"]
    if not isinstance(rows, list):
        raise _fail(path, f"labels must be a list of label rows, got {type(rows).__name__}")
    known = set(ids)
    ranks: dict[str, list[int]] = {}
    docs: set[tuple[str, str]] = set()
    for i, row in enumerate(rows, start=1):
        at = f"labels[{i}]"
        if not isinstance(row, dict) or set(row) != set(LABEL_FIELDS):
            raise _fail(path, f"{at} must be an object with exactly {', '.join(LABEL_FIELDS)}")
        qid = _string(row["query_id"], path, f"{at}.query_id")
        did = _string(row["doc_id"], path, f"{at}.doc_id")
        if qid not in known:
            raise _fail(path, f"{at}: query {shown(qid)!r} is not one of the file's query_ids")
        rank, label = row["rank"], row["label"]
        if isinstance(rank, bool) or not isinstance(rank, int) or not 1 <= rank <= k:
            raise _fail(path, f"{at}.rank must be an integer in 1..{k} (k), got {rank!r}")
        if (
            isinstance(label, bool)
            or not isinstance(label, int | float)
            or not math.isfinite(label)
            or not 0 <= label <= 1
        ):
            raise _fail(path, f"{at}.label must be a number in [0, 1], got {label!r}")
        key = row["answer_key"]
        if not isinstance(key, str) or not _HEX64.fullmatch(key):
            raise _fail(path, f"{at}.answer_key must be 64 hex digits (a generation key)")
        if (qid, did) in docs:
            raise _fail(path, f"{at}: document {shown(did)!r} appears twice for {shown(qid)!r}")
        docs.add((qid, did))
        ranks.setdefault(qid, []).append(rank)
    for qid, seen in ranks.items():
        if sorted(seen) != list(range(1, len(seen) + 1)):
            raise _fail(path, f"labels of query {shown(qid)!r} have ranks {sorted(seen)}, not 1..n")
    return rows


def read_baseline(path: str | Path) -> dict[str, Any]:
    """The baseline file at ``path``, checked field by field (module docstring): a dict with
    ``identity`` (:class:`EvalIdentity`), ``retriever`` (:class:`RetrieverIdentity`),
    ``dataset``, ``reader``, ``query_ids`` and ``labels`` (rows of :data:`LABEL_FIELDS`)."""
    from erag_dagster.core.input_files import load_json

    data = load_json(path)
    if not isinstance(data, dict) or data.get("format") != BASELINE_FORMAT:
        older = isinstance(data, dict) and data.get("format") == "erag-gate-baseline/1"
        hint = (
            "format 1 has no answer keys or digest and cannot be verified; write it again with "
            "erag-dagster baseline"
            if older
            else f'expected "format": "{BASELINE_FORMAT}"; write one with erag-dagster baseline'
        )
        raise _fail(path, f"not an erag-dagster gate baseline ({hint})")
    needed = ("identity", "retriever", "query_ids", "labels", "digest")
    missing = [key for key in needed if key not in data]
    if missing:
        raise _fail(path, f"baseline lacks {', '.join(missing)}")
    unknown = sorted(set(data) - set(TOP_FIELDS))
    if unknown:  # a field added by hand is refused, not carried along unread
        raise _fail(
            path,
            f"unknown field(s) {', '.join(repr(shown(u)) for u in unknown)} (a baseline holds "
            f"{', '.join(TOP_FIELDS)}); write it again with erag-dagster baseline",
        )
    identity, retriever = _identity(data, path), _retriever(data, path)
    dataset = _string(data.get("dataset", ""), path, "dataset")
    reader = _string(data.get("reader", ""), path, "reader")
    ids = _query_ids(data, path)
    rows = _label_rows(data, path, ids, identity.k)
    digest = baseline_digest(data["identity"], data["retriever"], ids, rows)
    if data["digest"] != digest:
        raise _fail(
            path,
            "its digest does not match its content (identity, retriever, query_ids or labels "
            "were edited since it was written); write it again with erag-dagster baseline",
        )
    return {
        "identity": identity,
        "retriever": retriever,
        "dataset": dataset,
        "reader": reader,
        "query_ids": ids,
        "labels": rows,
    }


def write_baseline(path: str | Path, payload: dict[str, Any], command: str, option: str) -> None:
    """Write ``payload`` to ``path`` atomically as ``command``'s output
    (:func:`erag_dagster.core.output_guard.writing_output`: a full disk is one StorageError naming
    ``option`` and the path; nothing is replaced then)."""
    import json

    from erag_dagster.core.output_guard import writing_output

    with writing_output(path, command, option) as tmp:
        Path(tmp).write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
