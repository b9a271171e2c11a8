"""The Python API's arguments, checked at the door (:mod:`erag_dagster.api`).

Each public function of the API calls its check first, before it reads a file, opens a store,
builds a reader or retrieves anything, so a wrong argument is one
:class:`~erag_dagster.core.errors.InputError` naming the argument — never a foreign
``AttributeError``/``TypeError``/polars error, never after minutes of work, and never after a
store was created. The rules:

* **Types.** A name is a non-empty ``str``; a path a non-empty ``str`` or ``os.PathLike``; a
  count an ``int`` (``bool`` is refused: ``True`` is not 1 resample); ``log`` a callable.
* **Lists are lists.** Where a list of names is expected (``retrievers``, several
  ``reader``\\ s) a ``str`` is refused (it would be split into characters: ``'bm25'`` → ``'b'``)
  and an empty list is refused (it is not "all of them": leave the argument out for the
  default). ``metrics`` also takes the documented comma-separated string (``"P@3,nDCG@3"``).
* **Counts and seeds.** ``k``, ``label_k``, ``n_resamples`` >= 1; ``seed`` an integer in
  ``[0, 2**32)`` (numpy's range). ``seed=None`` means the registry's fixed seed (0 unless set
  there), so the same call gives the same CIs and p-values every time.
* **Labels as the file reader reads them** (:func:`erag_dagster.api.load_labels_file`): a
  mapping ``{query_id (str): [label, ...]}`` whose labels are ``int``/``float`` numbers; a
  string (``'10'``) is refused, and so is a boolean unless ``compat="erag"`` (the reference
  implementation takes ``True``/``False`` as 1/0 — in a file and here alike). A labels frame
  needs ``query_id, rank, label`` with a numeric (boolean only in compat mode) ``label``.
* **Runs.** A run is a run file path (TREC, or ``.parquet``) or a frame (polars, or pandas:
  :func:`erag_dagster.core.input_files.as_polars_frame`) that a run file's rules accept
  (:func:`erag_dagster.retrieval.runs.check_run_frame`: ``query_id``, ``doc_id``, an integer
  ``rank`` >= 1 once per query, a document once per query, a finite ``score`` if any, nothing
  null, at least one row) — a frame with a repeated rank or a NaN score is refused here, as the
  same rows in a file are, not labelled for minutes.
* **Stores.** A label store path that exists must be a regular file, and the folder it goes in
  a folder (:func:`erag_dagster.labels.store_url.check_store_location`): a folder given as
  ``store`` is refused here, before the registry, the dataset or a reader is read.
* **Frames.** Wherever a frame is taken (a run, labels), a pandas frame is taken too.

The checks are of shape only; what a value means (a registry name, a metric's grammar, a file's
content) is checked by the code that uses it, still before any long work.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from erag_dagster.core.errors import InputError

__all__ = [
    "MAX_SEED",
    "check_evaluate",
    "check_label",
    "check_reader_names",
    "check_score",
]

MAX_SEED = 2**32 - 1
"""The largest seed (numpy's generators take seeds in ``[0, 2**32)``)."""


def check_evaluate(
    *,
    dataset: Any,
    retrievers: Any,
    reader: Any,
    metrics: Any,
    metric: Any,
    k: Any,
    label_k: Any,
    registry: Any,
    store: Any,
    n_resamples: Any,
    seed: Any,
    log: Any,
    progress: Any = None,
) -> None:
    """The arguments of :func:`erag_dagster.api.evaluate` (rules: module docstring)."""
    if not isinstance(dataset, str):
        raise InputError(
            f"dataset must be a dataset spec string (e.g. 'sample'), got {_kind(dataset)}"
        )
    if retrievers is not None:
        _names(retrievers, "retrievers", "['bm25', 'dense']")
    _reader(reader, many=True)
    _metrics(metrics, "metrics", optional=True)
    _name(metric, "metric", optional=True)
    _count(k, "k")
    _count(label_k, "label_k")
    _path(registry, "registry")
    _store(store)
    _count(n_resamples, "n_resamples")
    _seed(seed)
    _callable(log, "log")
    _callable(progress, "progress", "(done, total)")


def check_label(
    *,
    dataset: Any,
    run: Any,
    reader: Any,
    metric: Any,
    k: Any,
    store: Any,
    registry: Any,
    executor: Any,
    ray_address: Any,
    log: Any,
    progress: Any = None,
) -> None:
    """The arguments of :func:`erag_dagster.api.label` (rules: module docstring)."""
    from erag_dagster.data.loaders import Dataset

    if isinstance(dataset, str):
        _name(dataset, "dataset")
    elif not isinstance(dataset, Dataset):
        raise InputError(
            "dataset must be a dataset spec string or a loaded Dataset "
            f"(erag_dagster.data.loaders.Dataset), got {_kind(dataset)}"
        )
    _run(run)
    _reader(reader, many=False)
    _name(metric, "metric", optional=True)
    _count(k, "k")
    _store(store)
    _path(registry, "registry")
    _name(executor, "executor", optional=True)
    _name(ray_address, "ray_address", optional=True)
    _callable(log, "log")
    _callable(progress, "progress", "(done, total)")


def check_score(labels: Any, metrics: Any, compat: Any) -> None:
    """The arguments of :func:`erag_dagster.api.score` (rules: module docstring)."""
    import polars as pl

    if compat is not None and compat != "erag":
        raise InputError(f"compat must be None or 'erag', got {compat!r}")
    _metrics(metrics, "metrics", optional=False)
    from erag_dagster.core.input_files import as_polars_frame

    booleans = compat == "erag"
    frame = as_polars_frame(labels)
    if isinstance(labels, str | os.PathLike):
        _path(labels, "labels")
    elif isinstance(frame, pl.DataFrame):
        _labels_frame(frame, booleans)
    elif isinstance(labels, Mapping):
        for qid, values in labels.items():
            _label_list(qid, values, booleans)
    else:
        raise InputError(
            "labels must be a labels file path, a labels frame (query_id, rank, label; polars "
            f"or pandas) or a mapping {{query_id: [label, ...]}}, got {_kind(labels)}"
        )


def check_reader_names(reader: str | Sequence[str] | None, registry: Any) -> None:
    """Every reader argument that is not a config file names a registry reader (an unknown name
    is the registry's :class:`InputError`; a folder, FIFO or device that is no registry name is
    named as what it is) — checked before a store is opened or created."""
    from erag_dagster.core.input_files import UNBOUNDED, regular_file

    values = [reader] if reader is None or isinstance(reader, str) else list(reader)
    for value in values:
        if not value or (Path(value).exists() and not Path(value).is_dir()):
            continue
        try:
            registry.reader(value)
        except InputError:
            if Path(value).exists():
                regular_file(value, UNBOUNDED)  # says "is a folder, not a regular file"
            raise


# --- the rules ---------------------------------------------------------------------------


def _kind(value: Any) -> str:
    """A value for a message: its repr, cut to 40 characters, and its type."""
    text = repr(value)
    text = text if len(text) <= 40 else text[:37] + "..."
    return f"{text} ({type(value).__name__})"


def _name(value: Any, name: str, optional: bool = False) -> None:
    if value is None and optional:
        return
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"{name} must be a non-empty string, got {_kind(value)}")


def _names(value: Any, name: str, example: str) -> None:
    """A non-empty list (or tuple) of non-empty strings; a string is refused."""
    if isinstance(value, str):
        raise InputError(
            f"{name} must be a list of names such as {example}, got the string {value!r} "
            f"(write [{value!r}] for one)"
        )
    if not isinstance(value, Sequence):
        raise InputError(f"{name} must be a list of names such as {example}, got {_kind(value)}")
    if not value:
        raise InputError(
            f"{name} is an empty list; leave it out for the default, or name at least one"
        )
    for item in value:
        _name(item, f"every item of {name}")


def _reader(value: Any, many: bool) -> None:
    if value is None or isinstance(value, str):
        _name(value, "reader", optional=True)
        return
    if not many:
        raise InputError(
            f"reader must be one registry reader name or reader config path, got {_kind(value)} "
            "(label takes one reader; evaluate takes a list)"
        )
    _names(value, "reader", "['smollm2-135m', 'gemma3-270m']")


def _metrics(value: Any, name: str, optional: bool) -> None:
    """A list of metric names, or the documented comma-separated string."""
    if value is None and optional:
        return
    if isinstance(value, str):
        if not any(part.strip() for part in value.split(",")):
            raise InputError(f"{name} is empty; give a list such as ['P@3', 'nDCG@3']")
        return
    _names(value, name, "['P@3', 'nDCG@3']")


def _count(value: Any, name: str) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(f"{name} is {value!r}; it must be an integer >= 1")


def _seed(value: Any) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SEED:
        raise InputError(
            f"seed is {value!r}; it must be an integer in [0, {MAX_SEED}] (or None: the "
            "registry's fixed seed)"
        )


def _path(value: Any, name: str) -> None:
    if value is None:
        return
    if not isinstance(value, str | os.PathLike) or not str(os.fspath(value)).strip():
        raise InputError(f"{name} must be a non-empty path or URL string, got {_kind(value)}")


def _store(value: Any) -> None:
    """A store argument: a path or URL (:func:`_path`) whose location is a possible store
    (module docstring), the default store's too when ``value`` is ``None``."""
    from erag_dagster.labels.store import resolve_store
    from erag_dagster.labels.store_url import check_store_location

    _path(value, "store")
    check_store_location(resolve_store(value, writable=False))


def _callable(value: Any, name: str, takes: str = "one line (str)") -> None:
    if value is not None and not callable(value):
        raise InputError(f"{name} must be a callable taking {takes}, got {_kind(value)}")


def _run(value: Any) -> None:
    from erag_dagster.core.input_files import as_polars_frame
    from erag_dagster.retrieval.runs import check_run_frame

    if isinstance(value, str | os.PathLike):
        _path(value, "run")
        return
    frame = as_polars_frame(value)
    if frame is None:
        raise InputError(
            "run must be a run file path (TREC or .parquet) or a run frame (query_id, doc_id, "
            f"rank, score; polars or pandas), got {_kind(value)}"
        )
    check_run_frame(frame)


def _labels_frame(frame: Any, booleans: bool) -> None:
    import polars as pl

    missing = [c for c in ("query_id", "rank", "label") if c not in frame.columns]
    if missing:
        raise InputError(f"labels frame lacks column(s) {', '.join(missing)}")
    dtype = frame.schema["label"]
    if dtype == pl.Boolean and not booleans:
        raise InputError(
            "labels frame: label is a boolean column; labels are numbers (booleans are taken "
            "as 1/0 only with compat='erag', as in a labels file)"
        )
    if not (dtype.is_numeric() or dtype == pl.Boolean or dtype == pl.Null):
        raise InputError(f"labels frame: label must be a numeric column, got {dtype}")


def _label_list(qid: Any, values: Any, booleans: bool) -> None:
    if not isinstance(qid, str):
        raise InputError(f"labels: query id {_kind(qid)} must be a string (as in a labels file)")
    if isinstance(values, str) or not isinstance(values, Sequence):
        raise InputError(
            f"labels of query {qid!r} must be a list in rank order, got {_kind(values)}"
        )
    for rank, value in enumerate(values, start=1):
        boolean = isinstance(value, bool)
        if (boolean and not booleans) or not isinstance(value, int | float):
            hint = " (booleans are 1/0 only with compat='erag')" if boolean else ""
            raise InputError(
                f"labels: label at rank {rank} of query {qid!r} is {_kind(value)}, "
                f"not a number{hint}"
            )
