"""The labellings beyond the paper that Table 1 can add next to eRAG and the baselines.

Selected by the registry's ``evaluation.label_methods`` (or :class:`EvalSettings`):

=====================  ========================  ============================================
setting                Table 1 method            labels (module)
=====================  ========================  ============================================
``likelihood``         ``eRAG_likelihood``       teacher-forced P(gold | question, doc),
                                                 prefill only
                                                 (:mod:`erag_dagster.labels.likelihood`)
``signed``             ``signed_utility``        eRAG label − closed-book score, in [−1, 1]
                                                 (:mod:`erag_dagster.labels.signed`)
``likelihood_gain``    ``eRAG_likelihood_gain``  P(gold | question, doc) − P(gold | question),
                                                 in [−1, 1]: the likelihood label less the
                                                 reader's closed-book prior
                                                 (:mod:`erag_dagster.labels.likelihood_gain`)
=====================  ========================  ============================================

Costs per system (reader × retriever) beyond eRAG: ``likelihood`` one forward pass per
(pair, distinct gold) — or per (pair, label) for label outputs — and no decoding; ``signed``
one closed-book generation per query (shared by every retriever of the reader: it is stored
per query), its eRAG term comes from the store; ``likelihood_gain`` the likelihood label's
prefills (shared with ``likelihood``) plus one closed-book prefill per (query, label). All are
kept in the label store.

Their Table 1 (:func:`~erag_dagster.meta.correlation_report.label_methods_table`) is built with
the other correlation tables; this module only names the methods and computes their labels.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import polars as pl

from erag_dagster.core.code_versions import CodeVersion
from erag_dagster.core.errors import InputError
from erag_dagster.labels.executor import ExecutorSpec
from erag_dagster.labels.reader_calls import ReaderCalls

#: setting → the method name in Table 1.
LABEL_METHODS: dict[str, str] = {
    "likelihood": "eRAG_likelihood",
    "signed": "signed_utility",
    "likelihood_gain": "eRAG_likelihood_gain",
}

#: Table 1's reference row: the reader's closed-book score of each question given to every
#: document of its list (:func:`erag_dagster.labels.signed.closed_book_labels`). Not a
#: labelling of documents: never marked best in Table 1, left out of the agreement with the
#: judgments; there to show how much of the end-to-end quality needs no retrieval.
CLOSED_BOOK_METHOD = "closed_book"
#: Table-1 rows that are references, not labelling methods (never marked best).
REFERENCE_METHODS: frozenset[str] = frozenset({CLOSED_BOOK_METHOD})

#: Table-1 methods whose labels are signed (scored with ``evaluate_labels(signed=True)``).
SIGNED_METHODS: frozenset[str] = frozenset({"signed_utility", "eRAG_likelihood_gain"})

#: Settings that need teacher forcing (``continuation_log_probs``: the transformers backend).
TEACHER_FORCED: frozenset[str] = frozenset({"likelihood", "likelihood_gain"})


#: What ``evaluation.verdict_labels`` may name: eRAG's generated answers, or a label method.
VERDICT_LABELS: tuple[str, ...] = ("eRAG", *LABEL_METHODS)


def check_verdict_labels(name: str) -> str:
    """``name`` when it is one of :data:`VERDICT_LABELS`, else :class:`InputError`."""
    if name not in VERDICT_LABELS:
        raise InputError(f"unknown verdict labels {name!r}; known: {', '.join(VERDICT_LABELS)}")
    return name


def verdict_method(setting: str) -> str:
    """The Table-1 method name of a ``verdict_labels`` setting (``eRAG`` stays ``eRAG``)."""
    return LABEL_METHODS.get(setting, setting)


def check_label_methods(names: Sequence[str]) -> list[str]:
    """``names`` as a list, or :class:`InputError` naming the unknown one and the known ones."""
    if isinstance(names, str):
        raise InputError(f"label_methods must be a list, got the string {names!r}")
    for name in names:
        if name not in LABEL_METHODS:
            raise InputError(f"unknown label method {name!r}; known: {', '.join(LABEL_METHODS)}")
    return list(dict.fromkeys(names))


def label_method_code_versions(metric: str, methods: Sequence[str]) -> tuple[CodeVersion, ...]:
    """The versioned code the labels of ``methods`` (settings) depend on
    (:mod:`erag_dagster.core.code_versions`): ``likelihood`` its task and the prompt builder (it
    scores the eRAG prompt, decodes nothing); ``signed`` the eRAG label's code, the closed-book
    task and the signed formula; ``likelihood_gain`` the likelihood's, the closed-book prior's
    task and the gain formula. An unknown method is an :class:`InputError`."""
    from erag_dagster.labels.labeller import erag_code_versions
    from erag_dagster.labels.likelihood import LIKELIHOOD
    from erag_dagster.labels.likelihood_gain import CLOSED_BOOK_LIKELIHOOD, LIKELIHOOD_GAIN
    from erag_dagster.labels.signed import CLOSED_BOOK, SIGNED_UTILITY
    from erag_dagster.readers import prompts
    from erag_dagster.readers.presets import PRESETS

    versions: list[CodeVersion] = []
    for name in check_label_methods(methods):
        if name == "likelihood":
            versions += [LIKELIHOOD, prompts.PROMPT_BUILDER, PRESETS]
        elif name == "likelihood_gain":
            versions += [LIKELIHOOD, prompts.PROMPT_BUILDER, PRESETS]
            versions += [CLOSED_BOOK_LIKELIHOOD, LIKELIHOOD_GAIN]
        else:
            versions += [*erag_code_versions(metric), CLOSED_BOOK, SIGNED_UTILITY]
    return tuple(versions)


def extra_labels(
    run: pl.DataFrame,
    queries: pl.DataFrame,
    corpus: pl.DataFrame,
    reader,
    metric: str,
    methods: Sequence[str],
    store,
    run_id: str | None = None,
    log: Callable[[str], None] | None = None,
    executor: ExecutorSpec | ReaderCalls | None = None,
) -> dict[str, pl.DataFrame]:
    """Table-1 method name → ``query_id, doc_id, rank, label`` for each selected method.

    ``likelihood`` and ``likelihood_gain`` need a reader with ``continuation_log_probs``
    (teacher forcing: the in-process transformers backend); for any other reader they are left
    out, with one line to
    ``log``, rather than approximated. ``executor``: where the reader runs
    (:mod:`erag_dagster.labels.reader_calls`)."""
    from erag_dagster.labels.likelihood import likelihood_labels
    from erag_dagster.labels.likelihood_gain import likelihood_gain_labels
    from erag_dagster.labels.signed import signed_labels

    out: dict[str, pl.DataFrame] = {}
    for name in check_label_methods(methods):
        if name in TEACHER_FORCED and not hasattr(reader, "continuation_log_probs"):
            if log is not None:
                log(
                    f"{LABEL_METHODS[name]} left out: reader {getattr(reader, 'name', '?')!r} "
                    "cannot score a given answer (teacher forcing needs the transformers backend)"
                )
            continue
        if name == "likelihood":
            frame = likelihood_labels(
                run, queries, corpus, reader, metric, store, run_id, executor=executor
            )
        elif name == "likelihood_gain":
            frame = likelihood_gain_labels(
                run, queries, corpus, reader, metric, store, run_id, executor=executor
            )
        else:
            frame = signed_labels(
                run, queries, corpus, reader, metric, store, run_id, executor=executor
            )
        out[LABEL_METHODS[name]] = frame.select("query_id", "doc_id", "rank", "label")
    return out
