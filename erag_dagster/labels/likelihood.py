"""Likelihood labels: the reader's teacher-forced probability of the gold answer, no decoding.

eRAG labels a document by what the reader *generates* from it (one greedy answer, scored). A
likelihood label instead reads how probable the reader finds the gold answer given
``(question, document)`` — graded utility from the reader's own confidence, as in GroGU and
SePer — from one forward pass over the eRAG prompt followed by the gold continuation (prefill
only, :meth:`~erag_dagster.readers.transformers_reader.TransformersReader.continuation_log_probs`).
With ``c = (c_1..c_T)`` a continuation's tokens after the eRAG prompt ``x`` (question, the one
document, the answer prefix) and ``S(c) = Σ_t log p(c_t | x, c_<t)`` (natural log):

* **label outputs** (the downstream metric is ``accuracy``: yes/no/maybe, SUPPORTS/REFUTES):
  the label set ``Y`` is every distinct gold label of the evaluated queries, and::

      label = max_{g ∈ golds ∩ Y}  exp(S(g)) / Σ_{y ∈ Y} exp(S(y))

  the reader's probability of the gold label renormalised over the label set (0 when no gold
  is in ``Y``, which cannot happen for ``Y`` built from the golds);
* **free-text answers** (every other metric)::

      label = max_{g ∈ golds}  exp(S(g) / T_g)

  the geometric mean of the gold tokens' probabilities (length-normalised likelihood, so a
  long gold is not penalised for its length), in ``(0, 1]``; a gold with no token scores 0.

Continuations are the answers with one leading space, as the reader would write them after
its answer prefix. Values are stored in the label store like reader answers (``repr`` of the
float) under :func:`likelihood_fingerprint`: the reader's model, libraries and dtype, its eRAG
prompt, and the task (version, formula, label set) — not decoding settings, which never enter.
The stored text of a pair is the passage followed by the scored continuations, so a changed
gold or label set is a different key, never a stale value.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

import polars as pl

from erag_dagster.core.code_versions import CodeVersion
from erag_dagster.core.hashing import sha256_json
from erag_dagster.data.schema import require_answers
from erag_dagster.labels.cached import Subject, generate_stored
from erag_dagster.labels.executor import ExecutorSpec
from erag_dagster.labels.reader_calls import ReaderCalls, reader_calls
from erag_dagster.readers.passages import check_run_queries, run_with_passages

#: The likelihood task's version: its ``name/vN`` is part of every stored value's key
#: (:func:`likelihood_fingerprint`); raise it when a formula above changes.
LIKELIHOOD = CodeVersion("gold_likelihood", "1")
#: Pairs per engine step (its continuations are one reader call, or Ray chunks of this many).
LIKELIHOOD_STEP = 64
LABEL_METRICS = frozenset({"accuracy"})
"""Downstream metrics whose outputs are labels from a closed set (normalised over the set)."""

LABEL_SCHEMA = {"query_id": pl.String, "doc_id": pl.String, "rank": pl.Int64, "label": pl.Float64}


def geometric_mean_probability(log_probs: Sequence[float]) -> float:
    """``exp(mean_t log p_t)`` (natural log): the length-normalised likelihood of one
    continuation, in ``(0, 1]``; ``0.0`` for a continuation without tokens."""
    if not log_probs:
        return 0.0
    return math.exp(sum(log_probs) / len(log_probs))


def label_set_probability(sequence_log_probs: dict[str, float], golds: Sequence[str]) -> float:
    """``max_{g ∈ golds} exp(S(g)) / Σ_y exp(S(y))`` over the label set ``y`` in
    ``sequence_log_probs`` (label → summed token log-prob ``S``), computed stably (log-sum-exp);
    0.0 when no gold is in the set or the set is empty."""
    if not sequence_log_probs:
        return 0.0
    top = max(sequence_log_probs.values())
    norm = sum(math.exp(s - top) for s in sequence_log_probs.values())
    inside = [sequence_log_probs[g] for g in golds if g in sequence_log_probs]
    if not inside:
        return 0.0
    return math.exp(max(inside) - top) / norm


def label_set(queries: pl.DataFrame, metric: str) -> tuple[str, ...] | None:
    """The closed label set of a label-output task: the sorted distinct non-empty gold answers
    of ``queries`` when ``metric`` is in :data:`LABEL_METRICS`, else ``None`` (free text)."""
    if metric not in LABEL_METRICS:
        return None
    golds = queries.select(pl.col("answers").explode().str.strip_chars()).to_series()
    return tuple(sorted({g for g in golds.drop_nulls().to_list() if g}))


def likelihood_identity(reader, labels: tuple[str, ...] | None) -> dict:
    """What shapes a likelihood label: the reader's model, libraries, dtype and prompt (the
    eRAG prompt is the scored context), the task version with its formula and label set. Not
    decoding or post-processing: nothing is generated."""
    identity = reader.identity()
    shaping = {k: v for k, v in identity.items() if k != "decoding"}
    shaping.pop("postprocess_version", None)
    formula = "label-set normalised P(gold)" if labels else "exp(mean log p(gold tokens))"
    return {
        "task": LIKELIHOOD.task,
        "formula": formula,
        "label_set": list(labels) if labels else None,
        "reader": shaping,
    }


def likelihood_fingerprint(reader, labels: tuple[str, ...] | None) -> str:
    """Fingerprint of the likelihood task: sha256 of :func:`likelihood_identity`."""
    return sha256_json(likelihood_identity(reader, labels))


def gold_likelihoods(
    part: list[int],
    texts: Sequence[tuple[str, str]],
    scored: Sequence[Sequence[str]],
    golds: Sequence[Sequence[str]],
    labels: tuple[str, ...] | None,
    calls: ReaderCalls,
) -> list[str]:
    """The stored value (``repr`` of a float) of each subject in ``part``: one prefill per
    continuation in ``scored[i]`` after ``texts[j] = (question, passage)`` (``j``: the
    subject's position in ``part``), then, with a label set, P(gold) normalised over it
    (:func:`label_set_probability`), else the best gold's :func:`geometric_mean_probability`."""
    flat = [(j, i, c) for j, i in enumerate(part) for c in scored[i]]
    items = [(texts[j][0], texts[j][1], f" {c}") for j, _, c in flat]
    log_probs = calls("continuation_log_probs", items, chunk=LIKELIHOOD_STEP)
    per_subject: dict[int, dict[str, list[float]]] = {i: {} for i in part}
    for (_, i, cont), lp in zip(flat, log_probs, strict=True):
        per_subject[i][cont] = lp
    out = []
    for i in part:
        if labels:
            sums = {c: sum(lp) for c, lp in per_subject[i].items()}
            value = label_set_probability(sums, golds[i])
        else:
            value = max(
                (geometric_mean_probability(lp) for lp in per_subject[i].values()), default=0.0
            )
        out.append(repr(float(value)))
    return out


def _golds(answers: Sequence[str] | None) -> list[str]:
    return list(dict.fromkeys(a.strip() for a in answers or [] if a and a.strip()))


def likelihood_labels(
    run: pl.DataFrame,
    queries: pl.DataFrame,
    corpus: pl.DataFrame,
    reader,
    metric: str,
    store=None,
    run_id: str | None = None,
    executor: ExecutorSpec | ReaderCalls | None = None,
) -> pl.DataFrame:
    """``query_id, doc_id, rank, label`` (run order: query, rank) with the likelihood label of
    each pair (formulas: module docstring). Every pair of a query is scored on the same
    continuations: its golds (free text) or the label set. Values are kept in ``store`` when
    given, so a pair shared by two retrievers, or a re-run, is scored once. A run naming an
    unknown query or document, or a query without answers, is an :class:`InputError`.
    ``executor``: where the reader runs (:mod:`erag_dagster.labels.reader_calls`; on Ray each
    engine step's continuations are cut into chunks over the actors)."""
    rows = run.select("query_id", "doc_id", "rank").sort("query_id", "rank")
    if rows.height == 0:
        return pl.DataFrame(schema=LABEL_SCHEMA)
    check_run_queries(rows, queries)
    asked = queries.join(rows.select("query_id").unique(), on="query_id", how="semi")
    require_answers(asked, "likelihood labels")
    labels = label_set(queries, metric)
    joined = run_with_passages(rows, corpus).join(
        asked.select("query_id", "question", "answers"), on="query_id", how="left"
    )
    pairs = joined.rows(named=True)
    golds = [_golds(r["answers"]) for r in pairs]
    scored = [list(labels) if labels else g for g in golds]
    subjects = [
        Subject(r["query_id"], r["question"], r["doc_id"], f"{r['passage']}\n\n{json.dumps(s)}")
        for r, s in zip(pairs, scored, strict=True)
    ]

    def score(part: list[int], calls: ReaderCalls) -> list[str]:
        texts = [(pairs[i]["question"], pairs[i]["passage"]) for i in part]
        return gold_likelihoods(part, texts, scored, golds, labels, calls)

    with reader_calls(reader, executor) as calls:
        outputs = generate_stored(
            subjects,
            lambda part: score(part, calls),
            store,
            likelihood_fingerprint(reader, labels),
            f"{reader.name}:likelihood",
            likelihood_identity(reader, labels),
            run_id=run_id,
            step=LIKELIHOOD_STEP,
        ).outputs
    values = [float(v) for v in outputs]
    return joined.with_columns(label=pl.Series(values, dtype=pl.Float64)).select(list(LABEL_SCHEMA))
