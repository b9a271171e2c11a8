"""Semantic-similarity relevance labels (a classic baseline to eRAG), and agreement with humans.

Each retrieved passage gets a similarity to a *reference* text and a binary label
``label = 1.0 if similarity >= threshold else 0.0`` that every list metric can aggregate
(:func:`erag_dagster.metrics.list_metrics.evaluate_labels`).

References (``against``):

- ``"answer"`` — the query's gold answers; the similarity is the **maximum over the answers**
  (as downstream metrics take the max over gold answers). Queries without answers are refused.
- ``"question"`` — the query text, for collections without answers (BEIR). Caveat: with
  ``method="cosine"`` and the default encoder this is exactly the dense retriever's score, so
  these labels are circular when judging that retriever.

Passages are ``title + " " + text`` (as the retrievers index them). The default encoder is the
packaged all-MiniLM-L6-v2 (:class:`~erag_dagster.retrieval.encoder.TextEncoder`).

Methods:

- ``"cosine"`` — ``cos(e(passage), e(reference))`` of the encoder's mean-pooled, L2-normalised
  sentence embeddings; in ``[-1, 1]``.
- ``"bertscore"`` — greedy token matching (BERTScore, Zhang et al., ICLR 2020) on the encoder's
  contextual token embeddings (last layer, L2-normalised per token). For reference tokens
  ``x_1..x_m`` and passage tokens ``y_1..y_n``::

      R = (1/m) Σ_i max_j x_i·y_j      P = (1/n) Σ_j max_i x_i·y_j      F = 2PR / (P + R)

  without idf weighting and without baseline rescaling. Special tokens (``[CLS]``, ``[SEP]``)
  are left out on both sides (bert_score gives them zero weight but still lets them be matched;
  here they are neither). Texts longer than the encoder's ``max_length`` (256 word pieces for
  MiniLM) are truncated. The label uses **recall** — "is every reference token expressed
  somewhere in the passage" — since precision averages over the passage's many tokens that a
  short answer or question cannot cover (:func:`bertscore` returns all three).

Edge cases: a reference or passage with no (non-special) token has similarity 0.0; an empty run
gives an empty table; a run document missing from the corpus or a run query missing from the
queries is an :class:`InputError`.

Default thresholds (:data:`DEFAULT_THRESHOLDS`) are the cuts (grid step 0.01) that maximised
Cohen's kappa with the human judgments on BM25 top-10 lists (packaged MiniLM, float32 vs bf16
makes no difference at two decimals). Similarity of judged-relevant vs other pairs, mean
(10th–90th percentile), and ROC AUC:

=====================  ===========================  ===========================  =====  =====  =====
method / against       relevant                     other                        AUC    cut    kappa
=====================  ===========================  ===========================  =====  =====  =====
cosine / question      0.598 (0.42–0.76)            0.372 (0.17–0.57)            0.865  0.61   0.450
bertscore / question   0.680 (0.55–0.80)            0.502 (0.36–0.64)            0.883  0.68   0.508
cosine / answer        0.243 (0.06–0.49)            0.141 (-0.01–0.37)           0.695  0.45   0.148
bertscore / answer     0.717 (0.58–0.83)            0.381 (0.18–0.66)            0.914  0.67   0.510
=====================  ===========================  ===========================  =====  =====  =====

``question`` rows: BEIR SciFact test, all 300 queries (3,000 pairs, 265 judged relevant).
``answer`` rows: the first 300 SQuAD v1.1 dev questions over the 2,067 dev paragraphs (3,000
pairs; relevant = the question's source paragraph, so other paragraphs that contain the answer
count as non-relevant, which caps agreement). Sentence-level cosine to a few-word answer is a
weak signal (AUC 0.70); prefer ``bertscore`` against answers. The cuts are starting points:
calibrate on a judged sample of your own collection.
"""

from __future__ import annotations

import json
import math
import time
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

import numpy as np
import polars as pl

from erag_dagster.core.callbacks import NOTES
from erag_dagster.core.errors import InputError
from erag_dagster.data.schema import require_answers
from erag_dagster.readers.passages import check_run_queries, run_with_passages
from erag_dagster.retrieval.dense import passage_texts
from erag_dagster.retrieval.encoder import TextEncoder

if TYPE_CHECKING:
    import torch

Method = Literal["cosine", "bertscore"]
Against = Literal["answer", "question"]

METHODS: tuple[str, ...] = ("cosine", "bertscore")
AGAINST: tuple[str, ...] = ("answer", "question")

#: Default ``similarity >= threshold`` cuts for the packaged all-MiniLM-L6-v2 encoder, per
#: (method, against); see the module docstring for how they were chosen.
DEFAULT_THRESHOLDS: dict[tuple[str, str], float] = {
    ("cosine", "question"): 0.61,
    ("bertscore", "question"): 0.68,
    ("cosine", "answer"): 0.45,
    ("bertscore", "answer"): 0.67,
}

LABEL_SCHEMA = {
    "query_id": pl.String,
    "doc_id": pl.String,
    "rank": pl.Int64,
    "similarity": pl.Float64,
    "label": pl.Float64,
}


def _check_choice(value: str, allowed: Sequence[str], what: str) -> None:
    if value not in allowed:
        raise InputError(f"unknown {what} {value!r}; use one of {', '.join(allowed)}")


def _token_embeddings(
    encoder: TextEncoder, texts: Sequence[str], batch_size: int
) -> list[torch.Tensor]:
    """Per text, its non-special tokens' last-layer states, L2-normalised: ``(n_i, d)`` float32."""
    import torch

    # The encoder's (tokenizer, model) pair: the same weights as its sentence embeddings.
    tokenizer, model = encoder._loaded
    if encoder.num_threads and encoder.device.type == "cpu":
        torch.set_num_threads(encoder.num_threads)
    out: list[torch.Tensor] = [torch.zeros((0, encoder.dimension))] * len(texts)
    order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
    with torch.inference_mode():
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            batch = tokenizer(
                [texts[i] for i in idx],
                padding=True,
                truncation=True,
                max_length=encoder.max_length,
                return_special_tokens_mask=True,
                return_tensors="pt",
            )
            keep = (batch.pop("special_tokens_mask") == 0) & (batch["attention_mask"] == 1)
            hidden = model(**batch.to(encoder.device)).last_hidden_state.float().cpu()
            hidden = torch.nn.functional.normalize(hidden, dim=-1)
            for row, i in enumerate(idx):
                out[i] = hidden[row][keep[row]]
    return out


def _pad(tensors: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack ``(n_i, d)`` tensors into ``(b, max n, d)`` plus a ``(b, max n)`` validity mask."""
    import torch

    width = max(1, *(t.shape[0] for t in tensors))
    dim = tensors[0].shape[1]
    padded = torch.zeros((len(tensors), width, dim))
    mask = torch.zeros((len(tensors), width), dtype=torch.bool)
    for i, t in enumerate(tensors):
        padded[i, : t.shape[0]] = t
        mask[i, : t.shape[0]] = True
    return padded, mask


def _greedy_match(
    refs: Sequence[torch.Tensor], cands: Sequence[torch.Tensor]
) -> tuple[np.ndarray, np.ndarray]:
    """BERTScore ``(P, R)`` of aligned (reference, candidate) token-embedding pairs."""
    import torch

    ref, ref_mask = _pad(refs)
    cand, cand_mask = _pad(cands)
    sim = torch.bmm(ref, cand.transpose(1, 2))  # (b, m, n) token cosines
    pair_mask = ref_mask[:, :, None] & cand_mask[:, None, :]
    sim = sim.masked_fill(~pair_mask, -math.inf)
    best_for_ref = sim.max(dim=2).values.masked_fill(~ref_mask, 0.0)
    best_for_cand = sim.max(dim=1).values.masked_fill(~cand_mask, 0.0)
    n_ref = ref_mask.sum(1)
    n_cand = cand_mask.sum(1)
    both = (n_ref > 0) & (n_cand > 0)
    recall = torch.where(both, best_for_ref.sum(1) / n_ref.clamp(min=1), 0.0)
    precision = torch.where(both, best_for_cand.sum(1) / n_cand.clamp(min=1), 0.0)
    return precision.numpy().astype(np.float64), recall.numpy().astype(np.float64)


def bertscore(
    references: Sequence[str],
    candidates: Sequence[str],
    encoder: TextEncoder,
    batch_size: int | None = None,
) -> pl.DataFrame:
    """BERTScore ``precision, recall, f1`` of aligned (reference, candidate) text pairs.

    Formulas and edge cases as in the module docstring (``f1 = 0`` when ``P + R = 0``). Each
    distinct text is encoded once; candidates are processed in chunks of ``batch_size``
    (default: the encoder's) distinct texts so memory stays bounded for long runs.
    """
    if len(references) != len(candidates):
        raise InputError(
            f"bertscore needs aligned pairs: {len(references)} references, "
            f"{len(candidates)} candidates"
        )
    batch = batch_size or encoder.batch_size
    ref_texts = list(dict.fromkeys(references))
    ref_pos = {t: i for i, t in enumerate(ref_texts)}
    ref_tokens = _token_embeddings(encoder, ref_texts, batch)
    pairs = pl.DataFrame(
        {"ref": [ref_pos[t] for t in references], "cand": list(candidates)},
        schema={"ref": pl.Int64, "cand": pl.String},
    ).with_row_index("pair")
    cand_texts = pairs.get_column("cand").unique(maintain_order=True).to_list()
    precision = np.zeros(len(references))
    recall = np.zeros(len(references))
    for start in range(0, len(cand_texts), batch):
        chunk = cand_texts[start : start + batch]
        tokens = dict(zip(chunk, _token_embeddings(encoder, chunk, batch), strict=True))
        todo = pairs.filter(pl.col("cand").is_in(chunk))
        # bmm over pairs in sub-batches keeps the (b, m, n) similarity tensor small.
        for sub in todo.iter_slices(batch):
            p, r = _greedy_match(
                [ref_tokens[i] for i in sub.get_column("ref")],
                [tokens[t] for t in sub.get_column("cand")],
            )
            rows = sub.get_column("pair").to_numpy()
            precision[rows], recall[rows] = p, r
    denom = precision + recall
    f1 = np.divide(2 * precision * recall, denom, out=np.zeros_like(denom), where=denom > 0)
    return pl.DataFrame({"precision": precision, "recall": recall, "f1": f1})


def _cosine(
    references: Sequence[str], candidates: Sequence[str], encoder: TextEncoder
) -> np.ndarray:
    """Sentence-embedding cosine of aligned pairs (each distinct text encoded once)."""
    texts = list(dict.fromkeys([*references, *candidates]))
    pos = {t: i for i, t in enumerate(texts)}
    vectors = encoder.encode(texts)
    ref = vectors[[pos[t] for t in references]]
    cand = vectors[[pos[t] for t in candidates]]
    return np.einsum("ij,ij->i", ref, cand).astype(np.float64)


def semantic_labels(
    run: pl.DataFrame,
    corpus: pl.DataFrame,
    queries: pl.DataFrame,
    encoder: TextEncoder | None = None,
    method: Method = "cosine",
    against: Against = "answer",
    threshold: float | None = None,
    batch_size: int | None = None,
) -> pl.DataFrame:
    """Similarity labels for every ``(query_id, doc_id, rank)`` row of ``run``.

    Returns ``query_id, doc_id, rank, similarity, label`` (run order: query, then rank) with
    ``label = 1.0 if similarity >= threshold else 0.0``; ``threshold`` defaults to
    :data:`DEFAULT_THRESHOLDS` ``[(method, against)]``. ``encoder`` defaults to the packaged
    MiniLM. See the module docstring for the similarity definitions and edge cases.
    """
    _check_choice(method, METHODS, "similarity method")
    _check_choice(against, AGAINST, "reference")
    cut = DEFAULT_THRESHOLDS[(method, against)] if threshold is None else float(threshold)
    if not math.isfinite(cut):
        raise InputError(f"threshold must be a finite number, got {threshold}")
    rows = run.select(
        pl.col("query_id").cast(pl.String),
        pl.col("doc_id").cast(pl.String),
        pl.col("rank").cast(pl.Int64),
    ).sort("query_id", "rank")
    if rows.height == 0:
        return pl.DataFrame(schema=LABEL_SCHEMA)
    encoder = encoder or TextEncoder()

    with_text = run_with_passages(rows, corpus, render=passage_texts)
    check_run_queries(rows, queries)

    asked = queries.join(rows.select("query_id").unique(), on="query_id", how="semi")
    if against == "answer":
        require_answers(asked, "semantic labels against answers")
        refs = asked.select("query_id", reference=pl.col("answers")).explode("reference")
    else:
        refs = asked.select("query_id", reference=pl.col("question"))
    pairs = with_text.join(refs, on="query_id", how="inner")
    ref_texts = pairs.get_column("reference").fill_null("").to_list()
    cand_texts = pairs.get_column("passage").to_list()
    sims = _similarities(ref_texts, cand_texts, encoder, method, batch_size)
    return (
        pairs.with_columns(similarity=pl.Series(sims, dtype=pl.Float64))
        .group_by("query_id", "doc_id", "rank")
        .agg(pl.col("similarity").max())
        .with_columns(label=(pl.col("similarity") >= cut).cast(pl.Float64))
        .sort("query_id", "rank")
        .select(list(LABEL_SCHEMA))
    )


#: (encoder identity, method, reference, passage) -> similarity, for this process: the
#: reader x retriever partitions of one run share most of their (question, document) pairs,
#: and these labels do not depend on the reader. Bounded; cleared whole when full.
_SIMILARITIES: dict[tuple[str, str, str, str], float] = {}
_SIMILARITIES_MAX = 200_000


def _similarities(
    refs: Sequence[str],
    cands: Sequence[str],
    encoder: TextEncoder,
    method: str,
    batch_size: int | None,
) -> np.ndarray:
    """Similarity of each aligned (reference, passage) pair, computing only the pairs this
    process has not scored with the same encoder and method (:data:`_SIMILARITIES`)."""
    identity = json.dumps(encoder.identity(), sort_keys=True)
    keys = [(identity, method, r, c) for r, c in zip(refs, cands, strict=True)]
    todo = list(dict.fromkeys(k for k in keys if k not in _SIMILARITIES))
    fresh: dict[tuple[str, str, str, str], float] = {}
    if todo:  # an encoder pass, no reader: its size is the estimate (words, the encoder's unit)
        words = sum(len(k[2].split()) + len(k[3].split()) for k in todo)
        NOTES.info(
            f"semantic labels ({method}): {len(todo):,} pairs to encode, ~{words:,} words "
            f"({len(keys) - len(todo):,} already scored in this process)"
        )
        started = time.monotonic()
        new_refs, new_cands = [k[2] for k in todo], [k[3] for k in todo]
        if method == "cosine":
            values = _cosine(new_refs, new_cands, encoder)
        else:
            values = bertscore(new_refs, new_cands, encoder, batch_size)["recall"].to_numpy()
        fresh = dict(zip(todo, (float(v) for v in values), strict=True))
        NOTES.info(f"semantic labels ({method}): {len(todo):,} pairs encoded in "
                   f"{time.monotonic() - started:.1f} s")  # fmt: skip
    out = np.array([fresh[k] if k in fresh else _SIMILARITIES[k] for k in keys], np.float64)
    if len(_SIMILARITIES) + len(fresh) > _SIMILARITIES_MAX:
        _SIMILARITIES.clear()
    _SIMILARITIES.update(fresh)
    return out


def agreement(
    labels: pl.DataFrame, qrels: pl.DataFrame, relevance_level: int
) -> dict[str, float | int]:
    """Agreement of binary ``labels`` (``query_id, doc_id, label``) with human judgments.

    The human label of a pair is ``1`` when its judgment is ``>= relevance_level`` and ``0``
    otherwise; **an unjudged pair counts as non-relevant** (0), the usual pooled-judgment
    assumption (it inflates agreement on easy negatives, so read kappa, not raw agreement).
    A label counts as positive when ``>= 0.5``.

    Returns ``n`` (pairs), ``agreement`` (share of equal labels), ``kappa`` (Cohen's kappa,
    ``(p_o - p_e) / (1 - p_e)``, computed by ``sklearn.metrics.cohen_kappa_score``; ``nan``
    when undefined, i.e. both sides constant and equal, ``p_e = 1``), ``both``/``only_labels``/
    ``only_humans``/``neither`` (the 2x2 counts), ``label_positive_rate`` and
    ``human_positive_rate``. An empty ``labels`` table is an :class:`InputError`.
    """
    from sklearn.exceptions import UndefinedMetricWarning
    from sklearn.metrics import cohen_kappa_score

    if labels.height == 0:
        raise InputError("agreement needs at least one labelled (query, document) pair")
    human = qrels.select(
        pl.col("query_id").cast(pl.String),
        pl.col("doc_id").cast(pl.String),
        human=(pl.col("relevance") >= relevance_level).cast(pl.Int64),
    ).unique(["query_id", "doc_id"], keep="last")
    pairs = (
        labels.select(
            pl.col("query_id").cast(pl.String),
            pl.col("doc_id").cast(pl.String),
            ours=(pl.col("label").cast(pl.Float64) >= 0.5).cast(pl.Int64),
        )
        .join(human, on=["query_id", "doc_id"], how="left")
        .with_columns(pl.col("human").fill_null(0))
    )
    ours = pairs.get_column("ours").to_numpy()
    theirs = pairs.get_column("human").to_numpy()
    with warnings.catch_warnings():
        # sklearn warns when p_e == 1 and returns replace_undefined_by: nan is our answer.
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        kappa = float(cohen_kappa_score(ours, theirs, labels=[0, 1], replace_undefined_by=math.nan))
    n = int(ours.size)
    return {
        "n": n,
        "agreement": float(np.mean(ours == theirs)),
        "kappa": kappa,
        "both": int(np.sum((ours == 1) & (theirs == 1))),
        "only_labels": int(np.sum((ours == 1) & (theirs == 0))),
        "only_humans": int(np.sum((ours == 0) & (theirs == 1))),
        "neither": int(np.sum((ours == 0) & (theirs == 0))),
        "label_positive_rate": float(ours.mean()),
        "human_positive_rate": float(theirs.mean()),
    }
