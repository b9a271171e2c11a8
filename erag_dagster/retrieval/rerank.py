"""Second-stage reranking: reorder a first-stage top-N with a joint query–document scorer.

Pipeline per query: keep the first stage's ranks ``1..top_n`` (trec_eval order), score every
``(question, passage)`` pair with ``scorer`` (higher = more relevant), sort by that score
descending, keep the top ``k``. Output is a run ``query_id, doc_id, rank, score`` with ranks
``1..min(k, n)`` per query.

Scorers (any callable ``pairs -> scores``; an optional ``load()`` method is called before the
clock starts so model loading is not counted as latency):

- :class:`ReaderScorer` (default) — the offline reader LLM's ``P("yes")`` for "is this passage
  relevant to the question / does it contain the answer?"
  (:meth:`~erag_dagster.readers.transformers_reader.TransformersReader.yes_probability`),
  batched by the reader's ``batch_size``; built from the registry by
  :func:`erag_dagster.evaluation.retrievers.default_scorer`.
- :class:`CrossEncoderScorer` — any Hugging Face cross-encoder on disk
  (``AutoModelForSequenceClassification``, ``local_files_only=True``, remote code never
  trusted): ``sigmoid(logit)`` for one output, ``softmax[..., 1]`` for two.

The passage a scorer sees is :func:`~erag_dagster.readers.prompts.reader_passage` (title, newline,
text), the text the reader sees when labelling.

Ties policy: equal scorer outputs keep their **first-stage order** (lower first-stage rank
first). trec_eval ignores ranks and breaks score ties by doc id, so tied scores are separated in
the output: within a group of ``g`` equal scores ``s`` the ``j``-th (``j = 0..g-1``) gets
``s - j * ulp(s)`` (``numpy.spacing``). The change is at most ``g`` units in the last place of a
float64 — far below the float32 resolution of a model's output — and makes the run evaluate in
exactly its rank order.

Reproducibility: in bfloat16 the reader's ``P("yes")`` depends slightly on which prompts share
a padded batch (up to ~0.03 for SmolLM2-135M on CPU, as large as its typical margin between an
answering and an off-topic passage); float32 scores do not depend on batching. Pass
``overrides={"dtype": "float32"}`` to :func:`erag_dagster.evaluation.retrievers.default_scorer` when
rankings must be reproducible.

Cost: ``seconds_per_query`` = wall time of scoring + reordering / queries, ``docs_per_second``
= scored pairs / that time (model loading excluded).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import polars as pl

from erag_dagster.core.callbacks import Log
from erag_dagster.core.errors import InputError
from erag_dagster.metrics.human import evaluate_run
from erag_dagster.metrics.report import ListMetricReport
from erag_dagster.readers.passages import check_run_queries, run_with_passages
from erag_dagster.retrieval.runs import RUN_SCHEMA, rank_by_score, top_k
from erag_dagster.stats.settings import Statistics
from erag_dagster.stats.significance import compare_paired

if TYPE_CHECKING:
    import torch

Pairs = Sequence[tuple[str, str]]

#: Pairs handed to the scorer per call (progress is logged after each call).
SCORE_CHUNK = 256


class Scorer(Protocol):
    """``(question, passage)`` pairs → one relevance score each (higher is more relevant)."""

    def __call__(self, pairs: Pairs) -> Sequence[float]: ...


class ReaderScorer:
    """The reader LLM's ``P("yes")`` as a relevance score (the default second stage)."""

    def __init__(self, reader: Any) -> None:
        self.reader = reader

    def load(self) -> None:
        """Load the reader's model now (so reranking latency excludes it)."""
        self.reader.load()

    def __call__(self, pairs: Pairs) -> list[float]:
        return self.reader.yes_probability(list(pairs))

    def __repr__(self) -> str:
        return f"ReaderScorer({self.reader!r})"


class CrossEncoderScorer:
    """A local Hugging Face cross-encoder (e.g. an MS MARCO MiniLM cross-encoder folder).

    ``model`` is a folder or a hub id already in the local cache (nothing is downloaded; remote
    code is never trusted). Pairs are tokenised as ``(question, passage)``, the passage truncated
    to ``max_length`` tokens. One output logit → ``sigmoid(logit)``; two → ``softmax[:, 1]``.
    """

    def __init__(
        self,
        model: str,
        device: str = "auto",
        dtype: str = "float32",
        batch_size: int = 32,
        max_length: int = 512,
    ) -> None:
        from erag_dagster.core.devices import resolve_device, resolve_dtype

        if batch_size < 1:
            raise InputError(f"cross-encoder batch_size must be >= 1, got {batch_size}")
        self.model_name = model
        self.device = resolve_device(device)
        self.dtype = resolve_dtype(dtype, self.device)
        self.batch_size = batch_size
        self.max_length = max_length

    @cached_property
    def _loaded(self) -> tuple[Any, torch.nn.Module]:
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        try:
            tokenizer = AutoTokenizer.from_pretrained(self.model_name, local_files_only=True)
            model = AutoModelForSequenceClassification.from_pretrained(
                self.model_name, local_files_only=True, dtype=self.dtype
            )
        except OSError as exc:
            raise InputError(
                f"cross-encoder {self.model_name!r} not found locally ({str(exc).splitlines()[0]})"
            ) from None
        if model.config.num_labels not in (1, 2):
            raise InputError(
                f"cross-encoder {self.model_name!r} has {model.config.num_labels} outputs; "
                "expected 1 (relevance logit) or 2 (not relevant, relevant)"
            )
        model.to(self.device).eval()
        return tokenizer, model

    def load(self) -> None:
        """Load the model now."""
        self._loaded  # noqa: B018 - the cached property loads on first access

    def __call__(self, pairs: Pairs) -> list[float]:
        import torch

        tokenizer, model = self._loaded
        out: list[float] = []
        with torch.inference_mode():
            for start in range(0, len(pairs), self.batch_size):
                chunk = pairs[start : start + self.batch_size]
                batch = tokenizer(
                    [q for q, _ in chunk],
                    [p for _, p in chunk],
                    padding=True,
                    truncation="only_second",
                    max_length=self.max_length,
                    return_tensors="pt",
                ).to(self.device)
                logits = model(**batch).logits.float()
                if logits.shape[-1] == 1:
                    scores = torch.sigmoid(logits[:, 0])
                else:
                    scores = torch.softmax(logits, dim=-1)[:, 1]
                out.extend(scores.cpu().tolist())
        return out


@dataclass(frozen=True)
class RerankResult:
    """The reranked run and what it cost (scoring + reordering, model load excluded)."""

    run: pl.DataFrame
    seconds_per_query: float
    docs_per_second: float
    queries: int
    pairs: int
    seconds: float


def separate_ties(scores: np.ndarray, tie_position: np.ndarray) -> np.ndarray:
    """``s - j * ulp(s)`` for the ``j``-th member (0-based) of a group of equal scores.

    Keeps the values within a few float64 ulps while making them strictly decreasing in ``j``.
    """
    return scores - tie_position * np.spacing(np.abs(scores))


def rerank(
    run: pl.DataFrame,
    queries: pl.DataFrame,
    corpus: pl.DataFrame,
    scorer: Scorer,
    top_n: int = 100,
    k: int = 10,
    log: Log | None = None,
) -> RerankResult:
    """Rerank each query's first-stage top ``top_n`` by ``scorer`` and keep the top ``k``.

    ``run`` is a first-stage run (``query_id, doc_id, score``; ordered as trec_eval orders it,
    score descending then doc id descending); ``queries`` needs ``query_id, question``;
    ``corpus`` ``doc_id, title, text``. Policies in the module docstring. Raises
    :class:`InputError` when ``top_n``/``k`` are < 1 or ``k > top_n``, when a run query or
    document is unknown, or when the scorer returns the wrong number of scores or a NaN.
    An empty run gives an empty run (0 queries, 0 seconds).
    """
    if top_n < 1 or k < 1:
        raise InputError(f"top_n and k must be >= 1, got top_n={top_n}, k={k}")
    if k > top_n:
        raise InputError(f"k={k} is larger than top_n={top_n}: rerank keeps at most top_n")
    first = top_k(rank_by_score(run), top_n).rename({"rank": "first_rank"})
    if first.height == 0:
        return RerankResult(pl.DataFrame(schema=RUN_SCHEMA), 0.0, 0.0, 0, 0, 0.0)
    check_run_queries(first, queries)
    pairs = run_with_passages(first, corpus).join(
        queries.select(pl.col("query_id").cast(pl.String), "question"), on="query_id", how="left"
    )
    items = list(zip(pairs["question"].to_list(), pairs["passage"].to_list(), strict=True))
    n_queries = pairs["query_id"].n_unique()

    load = getattr(scorer, "load", None)
    if callable(load):
        load()
    started = time.perf_counter()
    scores: list[float] = []
    for start in range(0, len(items), SCORE_CHUNK):
        chunk = items[start : start + SCORE_CHUNK]
        got = [float(s) for s in scorer(chunk)]
        if len(got) != len(chunk):
            raise InputError(f"the scorer returned {len(got)} scores for {len(chunk)} pairs")
        scores.extend(got)
        if log:
            rate = len(scores) / max(time.perf_counter() - started, 1e-9)
            log(f"reranked {len(scores)}/{len(items)} pairs ({rate:.1f} pairs/s)")
    if any(math.isnan(s) for s in scores):
        raise InputError("the scorer returned NaN for a (question, passage) pair")
    reranked = (
        pairs.select("query_id", "doc_id", "first_rank", score=pl.Series(scores, dtype=pl.Float64))
        .sort(["query_id", "score", "first_rank"], descending=[False, True, False])
        .with_columns(rank=pl.int_range(1, pl.len() + 1, dtype=pl.Int64).over("query_id"))
        .filter(pl.col("rank") <= k)
        .with_columns(tie=pl.col("rank").rank("ordinal").over("query_id", "score") - 1)
    )
    separated = separate_ties(reranked["score"].to_numpy(), reranked["tie"].to_numpy())
    out = reranked.with_columns(score=pl.Series(separated, dtype=pl.Float64)).select(
        list(RUN_SCHEMA)
    )
    seconds = time.perf_counter() - started
    return RerankResult(
        run=out,
        seconds_per_query=seconds / n_queries,
        docs_per_second=len(items) / seconds if seconds > 0 else math.inf,
        queries=n_queries,
        pairs=len(items),
        seconds=seconds,
    )


LIFT_SCHEMA = {
    "metric": pl.String,
    "before": pl.Float64,
    "after": pl.Float64,
    "difference": pl.Float64,
    "ci_low": pl.Float64,
    "ci_high": pl.Float64,
    "p_perm": pl.Float64,
    "p_t": pl.Float64,
    "queries": pl.Int64,
    "depth": pl.Int64,
    "added_seconds_per_query": pl.Float64,
    "docs_per_second": pl.Float64,
}


def lift_report(
    qrels: pl.DataFrame,
    before: pl.DataFrame,
    after: pl.DataFrame | RerankResult,
    metrics: Sequence[str],
    stats: Statistics,
    *,
    relevance_level: int,
    depth: int | None = None,
) -> pl.DataFrame:
    """Quality/cost trade-off of a second stage: one row per metric.

    ``before`` (first stage) is compared at the **same depth** as ``after``: both are cut to
    their top ``depth`` documents (default: the deepest rank in ``after``, i.e. the reranker's
    ``k``), so ``AP``/``R`` do not favour the longer list; and ``before`` is restricted to the
    queries ``after`` holds (a reranker run on a subset is compared on that subset). Values are
    :func:`~erag_dagster.metrics.human.evaluate_run`'s (trec_eval conventions;
    ``relevance_level`` for binary measures).

    Columns: ``metric, before, after, difference (= after - before), ci_low, ci_high``
    (bootstrap CI of the difference), ``p_perm`` (paired randomisation test), ``p_t`` (paired
    t-test) — every draw with the evaluation's ``stats`` (resamples, permutations, confidence,
    seed) —, ``queries`` (scored by both), ``depth``, and when ``after`` is a
    :class:`RerankResult` its ``added_seconds_per_query`` and ``docs_per_second`` (else null).
    """
    result = after if isinstance(after, RerankResult) else None
    after_run = after.run if isinstance(after, RerankResult) else after
    if after_run.height == 0:
        raise InputError("lift report: the reranked run is empty")
    cut = int(after_run["rank"].max()) if depth is None else depth
    after_run = top_k(rank_by_score(after_run), cut)
    before_run = top_k(rank_by_score(before), cut).join(
        after_run.select("query_id").unique(), on="query_id", how="semi"
    )
    if before_run.height == 0:
        raise InputError("lift report: the first-stage run has none of the reranked queries")
    reports: dict[str, ListMetricReport] = {
        name: evaluate_run(qrels, r, list(metrics), relevance_level=relevance_level)
        for name, r in (("before", before_run), ("after", after_run))
    }
    rows = []
    for m in metrics:
        scores = {
            name: {q: v[m] for q, v in report.per_query.items()} for name, report in reports.items()
        }
        cmp = compare_paired(scores["after"], scores["before"], stats)
        rows.append(
            {
                "metric": m,
                "before": cmp.mean_b,
                "after": cmp.mean_a,
                "difference": cmp.difference,
                "ci_low": cmp.ci[0],
                "ci_high": cmp.ci[1],
                "p_perm": cmp.p_perm,
                "p_t": cmp.p_t,
                "queries": cmp.n,
                "depth": cut,
                "added_seconds_per_query": result.seconds_per_query if result else None,
                "docs_per_second": result.docs_per_second if result else None,
            }
        )
    return pl.DataFrame(rows, schema=LIFT_SCHEMA)
