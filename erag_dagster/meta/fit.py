"""Fit diagnostics: do one labelled run's labels fit the user's data?

From one (reader, retriever) labelling — the reader's answers, their eRAG labels, the queries'
gold answers and, where present, the human judgments — :func:`fit_diagnostics` computes:

- **cut answers**: the share of answers that stopped at ``max_new_tokens`` (an answer of at
  least ``max_new_tokens - CUT_SLACK`` tokens, counted by the reader's own tokenizer: the
  extracted answer, decoded and stripped, can re-tokenise one token shorter; an answer whose
  end was generated stops there, :mod:`erag_dagster.readers.extraction`, so it is shorter
  unless a lead-in or markup of a cut answer was removed). Unknown (``None``) without a token
  counter;
- **lengths**: mean answer length and mean gold-answer length, in whitespace words (a query's
  gold length is the mean over its gold answers; the mean over queries weights each query
  once);
- **separation** (:class:`Separation`), only with judgments: how well the labels separate the
  judged-relevant documents (``relevance >= relevance_level``) from the other labelled ones
  (judged non-relevant or unjudged): the area under the ROC curve of label vs judgment
  (Mann-Whitney; tied labels count one half; 0.5 = no separation, 1 = every relevant document
  above every other), with a percentile bootstrap CI over queries (a query's documents are
  drawn together; :mod:`erag_dagster.stats.correlation`'s resampling, a fixed seed).

:meth:`FitDiagnostics.warnings` turns them into one line each, with the fix, when they cross a
threshold (each constant below says where its value comes from):

- :data:`CUT_SHARE` — more than 10 % of answers cut: raise ``max_new_tokens``. A chosen
  bound, not a derived one (one answer in ten scored on a truncated text); on the long-answer
  set (docs/label-methods.md, "Long answers, measured") the packaged reader's answers were cut
  31 % of the time at 16 tokens and 6 % at 64;
- :data:`LONG_GOLD_WORDS` — gold answers of more than 5 words on average with ``em``/``f1``:
  score with ``rougel``; with ``contains``: it needs the whole gold inside the answer, so it
  labels nearly every pair 0 (every pair of the long-answer set). Five tokens is the
  short-answer bound of NQ-open (Lee, Chang & Toutanova, ACL 2019, §4.1; kept by DPR and RAG),
  the setting token F1 and EM were made for (Rajpurkar et al., EMNLP 2016); on the long-answer
  set ``rougel`` separated better than ``f1`` in every setting;
- :data:`SHORT_RATIO` — answers under half the gold length: token F1 of an answer holding a
  share ``r`` of the gold's words is at most ``2r / (1 + r)`` (recall ``<= r``), 0.67 at
  ``r = 0.5``, whatever the reader got right: raise ``max_new_tokens``, or ask for the whole
  answer sentence in the prompt;
- :data:`LONG_RATIO` — answers over twice the gold length: precision ``<= 1/2``, the same cap
  of 0.67 on F1: ask for the answer span only (``system_prompt``), or score with ``contains``;
- :data:`MIN_AUC` — AUC under 0.7, or a CI that holds 0.5: the labels do not separate the
  judged-relevant documents (0.7 is the lower bound of "acceptable discrimination" of Hosmer &
  Lemeshow, *Applied Logistic Regression*, 2nd ed. 2000, §5.2.4);
- :data:`SAME_LABEL_SHARE` — label outputs only (metric ``accuracy``): in more than this share
  of the queries with two or more labelled documents, the reader gave every document the same
  label (the first normalised token of its answer, as ``accuracy`` reads it). Its answers then
  follow its prior for the question, not the documents, and a baseline tracked the reader
  better than eRAG's generated labels on such data (docs/label-methods.md, "Yes/no/maybe
  answers"; 50 % is below the 55 % measured on that set's tuning half).

Labels scored against a reference answer instead of gold (``evaluation.reference``: their
frame has ``reference_answer`` and ``reference`` columns, :mod:`erag_dagster.labels.reference`):
the lengths and the length findings compare the answers with the reference answers — what they
were scored against, so the same F1 caps hold — and every line says "reference" where it says
"gold"; ``reference`` names it. A diagnostic that needs what the data lacks says it is not
available: the label-vs-judgment AUC without judgments (``not available: no judgments``).
A finding of a kind the evaluation declares expected (``evaluation.expected_fit``: kind → why,
e.g. a reader too small to separate well, measured) is printed as one line with that reason
instead of a warning (:meth:`FitDiagnostics.expected_lines`).

Edge cases: an empty label frame gives ``answers == 0`` and no warning; a query without gold
answers is left out of the gold length; no judgments, or no relevant or no other document among
the labelled ones, gives ``separation is None``; another metric than ``accuracy``, or no query
with two labelled documents, gives ``same_label_queries is None``. Plain data and numpy: no
Dagster, no reader.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import polars as pl

from erag_dagster.metrics.downstream import normalize_answer
from erag_dagster.stats.correlation import (
    check_bootstrap_args,
    percentile_interval,
    resample_blocks,
)
from erag_dagster.stats.settings import Statistics

CUT_SLACK = 1
"""Tokens of slack when telling a cut answer: ``tokens >= max_new_tokens - CUT_SLACK``."""
CUT_SHARE = 0.10
"""Warn when more than this share of answers stopped at ``max_new_tokens``."""
LONG_GOLD_WORDS = 5.0
"""Gold answers longer than this (mean words) are long answers (NQ-open's short-answer bound)."""
SHORT_RATIO = 0.5
"""Warn when mean answer words / mean gold words is below this (F1 capped at 0.67)."""
LONG_RATIO = 2.0
"""Warn when mean answer words / mean gold words is above this (precision capped at 0.5)."""
MIN_AUC = 0.7
"""Warn when the label-vs-judgment AUC is below this (Hosmer & Lemeshow's "acceptable")."""
SAME_LABEL_SHARE = 0.5
"""Warn (metric ``accuracy``) when the reader gives one label to every document of more than
this share of the queries. Chosen on the tuning half of the yes/no/maybe set
(docs/label-methods.md, "Yes/no/maybe answers"), where SmolLM2 did so on 55 % of the queries and
answer containment tracked it better than eRAG's generated labels on the held-out half in 4
of 7 list metrics with BM25 and 7 of 7 with dense."""
LABEL_OUTPUT_METRICS = ("accuracy",)
"""Metrics whose answers are labels (the same-label finding reads their first token)."""
SPAN_METRICS = ("em", "f1")
"""Metrics made for short answer spans (the long-answer warning names them)."""
NO_JUDGMENTS = "not available (no judgments)"
"""What the label-vs-judgment diagnostic says when the data has no judgments (or none among the
labelled documents)."""
SHORT_FIXES: dict[str, str] = {
    "cut": "answers cut at max_new_tokens: raise it",
    "long_golds": "long gold answers: metric rougel",
    "short_answers": "answers much shorter than the golds: more tokens or a sentence prompt",
    "long_answers": "answers much longer than the golds: a span prompt or metric contains",
    "separation": "labels barely follow the judgments",
    "same_label": "one label for every document",
}
"""Each kind of finding in a few words, for the compact report (one line per reader)."""
EXPECTED_PREFIX = "fit, expected"
"""How a line of a finding declared expected (``evaluation.expected_fit``) begins."""


@dataclass(frozen=True)
class Separation:
    """How well labels separate judged-relevant documents from the others (module docstring).

    ``auc`` in [0, 1] with its percentile bootstrap CI ``[low, high]`` (``nan`` bounds when
    fewer than two queries carry both kinds of document); ``relevant`` / ``others``: labelled
    pairs of each kind; ``queries``: queries labelled; ``mean_relevant`` / ``mean_other``: the
    mean label of each kind.
    """

    auc: float
    low: float
    high: float
    relevant: int
    others: int
    queries: int
    mean_relevant: float
    mean_other: float

    @property
    def text(self) -> str:
        """``AUC 0.74 [0.66, 0.81] (40 relevant, 120 other pairs)``."""
        ci = "" if math.isnan(self.low) else f" [{self.low:.2f}, {self.high:.2f}]"
        return f"AUC {self.auc:.2f}{ci} ({self.relevant} relevant, {self.others} other pairs)"


@dataclass(frozen=True)
class FitDiagnostics:
    """The fit of one labelled run: see the module docstring for every field's definition.

    ``cut_answers`` is ``None`` when the token counts are unknown; ``mean_gold_words`` is
    ``nan`` when no labelled query has gold answers; ``same_label_queries`` (of
    ``multi_doc_queries``, the queries with two or more labelled documents) is ``None`` but for
    label outputs (module docstring). ``label_methods`` and ``verdict_labels`` are what the
    evaluation has configured (``evaluation.label_methods``, ``evaluation.verdict_labels``): a
    fix already configured is not asked for again (:meth:`findings`). ``expected``: ``(kind,
    reason)`` pairs of ``evaluation.expected_fit`` — findings of those kinds are expected, and
    printed as one line with the reason instead of a warning (:meth:`expected_lines`).
    """

    reader: str
    retriever: str
    metric: str
    answers: int
    max_new_tokens: int | None
    cut_answers: int | None
    mean_answer_words: float
    mean_gold_words: float
    separation: Separation | None
    label_methods: tuple[str, ...]
    verdict_labels: str
    expected: tuple[tuple[str, str], ...]
    same_label_queries: int | None = None
    multi_doc_queries: int | None = None
    reference: str = ""
    """The ``evaluation.reference`` the labels were scored against (``""``: the gold
    answers); "gold" in every line becomes "reference" then."""

    @property
    def against(self) -> str:
        """What the answers were scored against, in words: ``gold`` or ``reference``."""
        return "reference" if self.reference else "gold"

    @property
    def same_label_share(self) -> float | None:
        """Share in [0, 1] of the multi-document queries whose answers all carry one label;
        ``None`` when not computed or no such query."""
        if self.same_label_queries is None or not self.multi_doc_queries:
            return None
        return self.same_label_queries / self.multi_doc_queries

    @property
    def cut_share(self) -> float | None:
        """Share of answers cut at ``max_new_tokens`` in [0, 1]; ``None`` when unknown."""
        if self.cut_answers is None or not self.answers:
            return None
        return self.cut_answers / self.answers

    @property
    def length_ratio(self) -> float:
        """Mean answer words / mean gold words (``nan`` without gold lengths)."""
        if math.isnan(self.mean_gold_words) or self.mean_gold_words <= 0:
            return math.nan
        return self.mean_answer_words / self.mean_gold_words

    @property
    def name(self) -> str:
        return f"{self.reader} / {self.retriever}" if self.retriever else self.reader

    def findings(self) -> list[tuple[str, str]]:
        """``(kind, text)`` per threshold crossed (kinds: the keys of :data:`SHORT_FIXES`),
        each text with its fix (module docstring); ``[]`` when the labels fit."""
        if not self.answers:
            return []
        out: list[tuple[str, str]] = []
        share = self.cut_share
        if share is not None and share > CUT_SHARE:
            text = (
                f"{share:.0%} of the answers stop at max_new_tokens={self.max_new_tokens} "
                f"(more than {CUT_SHARE:.0%}): they are cut; raise the reader's max_new_tokens "
                f"(e.g. {4 * int(self.max_new_tokens or 16)})"
            )
            out.append(("cut", text))
        gold, ratio, against = self.mean_gold_words, self.length_ratio, self.against
        long_golds = not math.isnan(gold) and gold > LONG_GOLD_WORDS
        if long_golds and self.metric in SPAN_METRICS:
            text = (
                f"{against} answers average {gold:.1f} words (long answers: more than "
                f"{LONG_GOLD_WORDS:.0f}), scored with {self.metric}, a short-span metric: use "
                "metric rougel for long answers"
            )
            out.append(("long_golds", text))
        if long_golds and self.metric == "contains":
            text = (
                f"{against} answers average {gold:.1f} words and contains needs a whole "
                f"{against} answer inside the reader's answer, so nearly every label is 0: use "
                "metric rougel"
            )
            out.append(("long_golds", text))
        words = f"answers average {self.mean_answer_words:.1f} words against {gold:.1f}"
        if not math.isnan(ratio) and ratio < SHORT_RATIO:
            cap = 2 * ratio / (1 + ratio)
            text = (
                f"{words} in the {against} answers (ratio {ratio:.2f} < {SHORT_RATIO}; F1 can "
                f"reach at most {cap:.2f}): raise max_new_tokens, or a prompt that asks for the "
                "whole answer sentence"
            )
            out.append(("short_answers", text))
        if not math.isnan(ratio) and ratio > LONG_RATIO:
            text = (
                f"{words} in the {against} answers (ratio {ratio:.2f} > {LONG_RATIO:.0f}): a "
                "prompt "
                "that asks for the answer span only (system_prompt), or metric contains"
            )
            out.append(("long_answers", text))
        sep = self.separation
        if sep is not None and (sep.auc < MIN_AUC or (sep.low <= 0.5 <= sep.high)):
            text = (
                f"labels separate judged-relevant from other documents poorly: {sep.text}; "
                f"below {MIN_AUC} or a CI holding 0.5 means the labels barely follow the "
                "judgments: check the fixes above, the metric, or a larger reader"
            )
            out.append(("separation", text))
        same = self.same_label_share
        if same is not None and same > SAME_LABEL_SHARE:
            text = (
                f"the reader gave one label to every document of {self.same_label_queries} of "
                f"{self.multi_doc_queries} queries ({same:.0%}, more than {SAME_LABEL_SHARE:.0%}):"
                " its answers follow its prior for the question, not the documents, so its "
                f"generated labels can rank retrievers by noise; {self._same_label_fix()}"
            )
            out.append(("same_label", text))
        return out

    def _same_label_fix(self) -> str:
        """The same-label finding's fix, given what is configured (docs/label-methods.md,
        "Label-set answers: one recommendation")."""
        if self.verdict_labels == "likelihood_gain":
            return (
                "the verdict already ranks retrievers by eRAG_likelihood_gain "
                "(evaluation.verdict_labels), so this concerns Table 1's eRAG row only"
            )
        if "likelihood_gain" in self.label_methods:
            return (
                "eRAG_likelihood_gain is computed (evaluation.label_methods): read its Table-1 "
                "row next to eRAG's and closed_book's, and rank the verdict by it with "
                "evaluation.verdict_labels: likelihood_gain"
            )
        return (
            "add evaluation.verdict_labels: likelihood_gain (it computes the label too) and "
            "read Table 1's closed_book row next to eRAG's"
        )

    def warnings(self) -> list[str]:
        """The :meth:`findings` not declared expected, as lines naming the run:
        ``fit warning [reader / retriever]: ...``."""
        reasons = dict(self.expected)
        return [
            f"fit warning [{self.name}]: {text}"
            for kind, text in self.findings()
            if kind not in reasons
        ]

    def expected_lines(self) -> list[str]:
        """The :meth:`findings` declared expected (``evaluation.expected_fit``), each as one line
        with its reason: ``fit, expected [reader / retriever]: ... — expected: <reason>``."""
        reasons = dict(self.expected)
        return [
            f"{EXPECTED_PREFIX} [{self.name}]: {text} — expected: {reasons[kind]}"
            for kind, text in self.findings()
            if kind in reasons
        ]

    def as_dict(self) -> dict[str, object]:
        """Plain data for a frame, JSON or the HTML page: every field, the separation's flat
        (``auc``, ``auc_low``, ... ``None`` without judgments), ``cut_share`` and ``warnings``."""
        row = {k: v for k, v in asdict(self).items() if k != "separation"}
        row["label_methods"] = ",".join(self.label_methods)  # one CSV cell
        row["expected"] = json.dumps(dict(self.expected), sort_keys=True)  # one CSV cell
        sep = self.separation
        row.update(
            cut_share=self.cut_share,
            same_label_share=self.same_label_share,
            auc=None if sep is None else sep.auc,
            auc_low=None if sep is None else sep.low,
            auc_high=None if sep is None else sep.high,
            relevant_pairs=None if sep is None else sep.relevant,
            other_pairs=None if sep is None else sep.others,
            queries=None if sep is None else sep.queries,
            mean_label_relevant=None if sep is None else sep.mean_relevant,
            mean_label_other=None if sep is None else sep.mean_other,
            warnings=self.warnings(),
            expected_findings=self.expected_lines(),
        )
        return row


def fit_from_dict(row: dict[str, object]) -> FitDiagnostics:
    """The :class:`FitDiagnostics` that :meth:`FitDiagnostics.as_dict` wrote (the ``fit``
    asset's stored value; derived entries — ``cut_share``, ``warnings`` — are recomputed)."""

    def number(key: str) -> float:
        value = row.get(key)
        return math.nan if value is None else float(value)  # JSON has no NaN: None

    separation = None
    if row.get("auc") is not None:
        separation = Separation(
            auc=number("auc"), low=number("auc_low"), high=number("auc_high"),
            relevant=int(row["relevant_pairs"]), others=int(row["other_pairs"]),
            queries=int(row.get("queries") or 0),
            mean_relevant=number("mean_label_relevant"), mean_other=number("mean_label_other"),
        )  # fmt: skip
    cut = row.get("cut_answers")
    limit = row.get("max_new_tokens")
    return FitDiagnostics(
        reader=str(row["reader"]), retriever=str(row["retriever"]), metric=str(row["metric"]),
        answers=int(row["answers"]), max_new_tokens=None if limit is None else int(limit),
        cut_answers=None if cut is None else int(cut),
        mean_answer_words=number("mean_answer_words"), mean_gold_words=number("mean_gold_words"),
        separation=separation, same_label_queries=_optional_int(row.get("same_label_queries")),
        multi_doc_queries=_optional_int(row.get("multi_doc_queries")),
        reference=str(row.get("reference") or ""),
        label_methods=_methods(row.get("label_methods")),
        verdict_labels=str(row.get("verdict_labels") or "eRAG"),
        expected=_expected(row.get("expected")),
    )  # fmt: skip


def _methods(value: object) -> tuple[str, ...]:
    """``label_methods`` as :meth:`FitDiagnostics.as_dict` wrote it (comma-joined; a list
    from older values), as a tuple."""
    if isinstance(value, str):
        return tuple(m for m in value.split(",") if m)
    return tuple(str(m) for m in value or ())  # type: ignore[union-attr]


def _expected(value: object) -> tuple[tuple[str, str], ...]:
    """``expected`` as :meth:`FitDiagnostics.as_dict` wrote it (a JSON object), as pairs."""
    if not value:
        return ()
    found = json.loads(value) if isinstance(value, str) else dict(value)  # type: ignore[arg-type]
    return tuple(sorted((str(k), str(v)) for k, v in found.items()))


def _optional_int(value: object) -> int | None:
    return None if value is None else int(value)  # type: ignore[arg-type]


def same_label_counts(labels: pl.DataFrame, metric: str) -> tuple[int | None, int | None]:
    """``(same, multi)`` for label outputs (``metric`` in :data:`LABEL_OUTPUT_METRICS`):
    ``multi`` queries of ``labels`` (``query_id, answer``) have two or more rows, ``same`` of
    them one answer label on every row (the first token of the normalised answer; an empty
    answer is its own label). ``(None, None)`` for other metrics or no multi-document query."""
    if metric not in LABEL_OUTPUT_METRICS or not labels.height:
        return None, None
    firsts: dict[str, list[str]] = {}
    for qid, answer in labels.select(pl.col("query_id").cast(pl.String), "answer").rows():
        tokens = normalize_answer(answer or "").split()
        firsts.setdefault(qid, []).append(tokens[0] if tokens else "")
    multi = [v for v in firsts.values() if len(v) >= 2]
    if not multi:
        return None, None
    return sum(len(set(v)) == 1 for v in multi), len(multi)


def label_auc(labels: Sequence[float] | np.ndarray, relevant: Sequence[bool] | np.ndarray) -> float:
    """Area under the ROC curve of ``labels`` for telling ``relevant`` items from the others
    (Mann-Whitney U / (n1 n0), average ranks, so ties count one half). ``nan`` when either
    class is empty."""
    x = np.asarray(labels, dtype=np.float64)
    y = np.asarray(relevant, dtype=bool)
    n1 = int(y.sum())
    n0 = y.size - n1
    if n1 == 0 or n0 == 0:
        return math.nan
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(x.size, dtype=np.float64)
    sorted_x = x[order]
    # average rank of each run of equal values (1-based)
    starts = np.flatnonzero(np.r_[True, sorted_x[1:] != sorted_x[:-1]])
    ends = np.r_[starts[1:], x.size]
    for s, e in zip(starts, ends, strict=True):
        ranks[order[s:e]] = (s + e + 1) / 2.0
    return float((ranks[y].sum() - n1 * (n1 + 1) / 2.0) / (n1 * n0))


def separation(frame: pl.DataFrame, stats: Statistics) -> Separation | None:
    """:class:`Separation` of a frame with ``query_id, label, relevant`` (bool) rows; the CI
    resamples queries with replacement (``stats.resamples`` times from ``stats.seed``, at
    ``stats.confidence``); ``None`` when one of the two kinds of document is missing."""
    n_resamples, seed, confidence = stats.resamples, stats.seed, stats.confidence
    check_bootstrap_args(n_resamples, confidence)
    labels = frame.get_column("label").cast(pl.Float64).to_numpy()
    relevant = frame.get_column("relevant").cast(pl.Boolean).to_numpy()
    auc = label_auc(labels, relevant)
    if math.isnan(auc):
        return None
    groups = frame.with_row_index("_i").group_by("query_id", maintain_order=True).agg("_i")
    members = [np.asarray(ix, dtype=np.intp) for ix in groups.get_column("_i").to_list()]
    low = high = math.nan
    if len(members) >= 2:
        rng = np.random.default_rng(seed)
        draws: list[float] = []
        for block in resample_blocks(rng, len(members), n_resamples):
            for row in block:
                ix = np.concatenate([members[q] for q in row])
                draws.append(label_auc(labels[ix], relevant[ix]))
        kept = [d for d in draws if not math.isnan(d)]
        low, high = percentile_interval(kept, confidence)
    return Separation(
        auc=auc,
        low=low,
        high=high,
        relevant=int(relevant.sum()),
        others=int((~relevant).sum()),
        queries=len(members),
        mean_relevant=float(labels[relevant].mean()),
        mean_other=float(labels[~relevant].mean()),
    )


def _words(text: str | None) -> int:
    return len((text or "").split())


def fit_diagnostics(
    labels: pl.DataFrame,
    queries: pl.DataFrame,
    qrels: pl.DataFrame | None = None,
    *,
    reader: str = "",
    retriever: str = "",
    metric: str = "",
    max_new_tokens: int | None = None,
    count_tokens: Callable[[str], int] | None = None,
    answer_tokens: Sequence[int] | None = None,
    relevance_level: int,
    stats: Statistics,
    label_methods: Sequence[str],
    verdict_labels: str,
    expected: Mapping[str, str],
) -> FitDiagnostics:
    """The :class:`FitDiagnostics` of one labelled run.

    ``labels``: ``query_id, doc_id, label, answer`` rows (a ``doc_labels`` frame);
    ``queries``: ``query_id, answers`` (list of gold strings); ``qrels``: ``query_id, doc_id,
    relevance`` or ``None``/empty. Token counts per answer come from ``answer_tokens`` (in
    ``labels`` row order) or else ``count_tokens`` (the reader's tokenizer, e.g. its
    ``count_tokens`` method); with neither, or without ``max_new_tokens``, the cut share is
    unknown. ``metric`` names the downstream metric the labels were scored with;
    ``relevance_level`` and ``stats`` (the AUC's bootstrap CI) are the configuration's;
    ``label_methods`` / ``verdict_labels`` what the evaluation configured (the fixes named);
    ``expected``: finding kind -> why it is expected (``evaluation.expected_fit``).
    """
    answers = labels.get_column("answer").fill_null("").to_list() if labels.height else []
    cut: int | None = None
    if max_new_tokens is not None and (answer_tokens is not None or count_tokens is not None):
        tokens = list(answer_tokens) if answer_tokens is not None else []
        if answer_tokens is None and count_tokens is not None:
            tokens = [count_tokens(a) for a in answers]
        cut = sum(t >= max_new_tokens - CUT_SLACK for t in tokens)
    mean_answer = float(np.mean([_words(a) for a in answers])) if answers else math.nan
    asked = labels.select("query_id").unique() if labels.height else pl.DataFrame()
    gold_means: list[float] = []
    reference = _reference_of(labels)
    if reference:  # scored against reference answers: their lengths, one per query
        queries = (
            labels.select(pl.col("query_id").cast(pl.String), "reference_answer")
            .unique("query_id", keep="first")
            .select("query_id", pl.concat_list("reference_answer").alias("answers"))
        )
    if labels.height:
        golds = queries.select(pl.col("query_id").cast(pl.String), "answers").join(
            asked, on="query_id", how="semi"
        )
        for gold in golds.get_column("answers").to_list():
            if gold:
                gold_means.append(float(np.mean([_words(g) for g in gold])))
    mean_gold = float(np.mean(gold_means)) if gold_means else math.nan
    sep = None
    if qrels is not None and qrels.height and labels.height:
        relevant = qrels.filter(pl.col("relevance") >= relevance_level).select(
            pl.col("query_id").cast(pl.String), pl.col("doc_id").cast(pl.String),
            pl.lit(True).alias("relevant"),
        )  # fmt: skip
        judged = labels.select(
            pl.col("query_id").cast(pl.String), pl.col("doc_id").cast(pl.String), "label"
        ).join(relevant, on=["query_id", "doc_id"], how="left")
        judged = judged.with_columns(pl.col("relevant").fill_null(False))
        sep = separation(judged, stats)
    same, multi = same_label_counts(labels, metric)
    return FitDiagnostics(
        reader=reader,
        retriever=retriever,
        metric=metric,
        answers=len(answers),
        max_new_tokens=max_new_tokens,
        cut_answers=cut,
        mean_answer_words=mean_answer,
        mean_gold_words=mean_gold,
        separation=sep,
        same_label_queries=same,
        multi_doc_queries=multi,
        reference=reference,
        label_methods=tuple(label_methods),
        verdict_labels=verdict_labels,
        expected=tuple(sorted(expected.items())),
    )


def _reference_of(labels: pl.DataFrame) -> str:
    """The ``evaluation.reference`` of labels scored against reference answers (their first
    row's provenance), ``""`` for labels against gold."""
    if "reference" not in labels.columns or not labels.height:
        return ""
    first = labels.get_column("reference")[0]
    return str(json.loads(first).get("reference", "")) if first else ""


def reader_fit(
    labels: pl.DataFrame,
    queries: pl.DataFrame,
    qrels: pl.DataFrame | None,
    reader: Any,
    *,
    reader_name: str = "",
    retriever: str = "",
    metric: str = "",
    relevance_level: int,
    stats: Statistics,
    label_methods: Sequence[str],
    verdict_labels: str,
    expected: Mapping[str, str],
) -> FitDiagnostics:
    """:func:`fit_diagnostics` for labels a reader object made: its ``spec.max_new_tokens``
    and its ``count_tokens`` (when it has one; a transformers reader loads its model for it if
    every answer came from the store). ``reader_name`` defaults to the reader's ``name``."""
    spec = getattr(reader, "spec", None)
    max_new = getattr(spec, "max_new_tokens", None)
    return fit_diagnostics(
        labels, queries, qrels,
        reader=reader_name or str(getattr(reader, "name", "")), retriever=retriever,
        metric=metric, max_new_tokens=None if max_new is None else int(max_new),
        count_tokens=getattr(reader, "count_tokens", None), relevance_level=relevance_level,
        stats=stats, label_methods=label_methods,
        verdict_labels=verdict_labels, expected=expected,
    )  # fmt: skip


def fit_frame(diagnostics: Sequence[FitDiagnostics]) -> pl.DataFrame:
    """One row per diagnosed run (:meth:`FitDiagnostics.as_dict`; ``warnings`` as one string,
    a line per warning, so the frame writes to CSV)."""
    rows = [
        {
            **d.as_dict(),
            "warnings": "\n".join(d.warnings()),
            "expected_findings": "\n".join(d.expected_lines()),
        }
        for d in diagnostics
    ]
    return pl.DataFrame(rows, infer_schema_length=None) if rows else pl.DataFrame()


def fit_lines(diagnostics: Sequence[FitDiagnostics]) -> list[str]:
    """Every warning line of every run (``[]`` when all labels fit, or every finding is
    expected): what a report prints as warnings."""
    return [line for d in diagnostics for line in d.warnings()]


def expected_fit_lines(diagnostics: Sequence[FitDiagnostics]) -> list[str]:
    """Every expected finding of every run, one line each with its reason
    (:meth:`FitDiagnostics.expected_lines`)."""
    return [line for d in diagnostics for line in d.expected_lines()]


def format_fit(diagnostics: Sequence[FitDiagnostics], full: bool = True) -> str:
    """The text section. ``full``: one line per run (cut share, lengths, AUC), then every
    warning, or a line saying the labels fit. Compact (``full=False``, ``erag-dagster run``'s
    default): one line when no run has a warning, else one line per reader naming each kind of
    finding and on how many of its runs (:data:`SHORT_FIXES`)."""
    if not full:
        return _compact(diagnostics)
    lines = []
    for d in diagnostics:
        share = "unknown" if d.cut_share is None else f"{d.cut_share:.0%}"
        gold = "n/a" if math.isnan(d.mean_gold_words) else f"{d.mean_gold_words:.1f}"
        sep = NO_JUDGMENTS if d.separation is None else d.separation.text
        scored = f"{d.metric} against reference {d.reference}" if d.reference else d.metric
        lines.append(
            f"{d.name}: {d.answers} answers ({scored}), cut at max_new_tokens="
            f"{d.max_new_tokens}: {share}; words per answer {d.mean_answer_words:.1f} vs "
            f"{d.against} {gold}; label vs judgment: {sep}"
        )
    warnings = fit_lines(diagnostics)
    fits = "no fit warning: the labels fit the data (thresholds: docs/label-methods.md)"
    lines += warnings or [fits]
    lines += expected_fit_lines(diagnostics)
    return "\n".join(lines)


def _compact(diagnostics: Sequence[FitDiagnostics]) -> str:
    """One line over every run: each kind of finding with the runs it holds for, or that none
    has a warning; the extremes (largest cut share, AUC range) in brackets. Findings declared
    expected (``evaluation.expected_fit``) are named with their counts on that line when no
    warning is left, else on a second line; their reasons are printed by the full format (the
    run's first page stays within 60 lines, docs/default-run.md)."""
    runs = len(diagnostics)
    shares = [d.cut_share for d in diagnostics if d.cut_share is not None]
    aucs = [d.separation.auc for d in diagnostics if d.separation is not None]
    facts = []
    if shares:
        facts.append(f"answers cut at most {max(shares):.0%}")
    if aucs:
        facts.append(f"label-vs-judgment AUC {min(aucs):.2f}-{max(aucs):.2f}")
    detail = f" ({'; '.join(facts)})" if facts else ""
    kinds: dict[str, int] = {}
    expected: dict[str, int] = {}
    for d in diagnostics:
        declared = dict(d.expected)
        for kind in dict.fromkeys(kind for kind, _ in d.findings()):
            counts = expected if kind in declared else kinds
            counts[kind] = counts.get(kind, 0) + 1
    named = ", ".join(
        f"{SHORT_FIXES[k].split(': ')[0]} ({n} of {runs} runs)" for k, n in expected.items()
    )
    declared_note = f"{EXPECTED_PREFIX}: {named}" if expected else ""
    if not kinds:
        said = f"; {declared_note}; why," if expected else ";"
        return f"no fit warning on {runs} reader x retriever runs{detail}{said} each run: --full"
    said = "; ".join(f"{SHORT_FIXES[k]} ({n} of {runs} runs)" for k, n in kinds.items())
    head = f"fit warning: {said} [{runs} runs{detail}; each run and its fix: --full]"
    return "\n".join([head, *([f"{declared_note} (why: --full)"] if expected else [])])
