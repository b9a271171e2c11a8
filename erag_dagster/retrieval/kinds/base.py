"""What a retriever kind is: its registration (:class:`RetrieverKind`), what one run of it is
handed (:class:`RunRequest`) and the value rules its keys share.

A kind is registered once (:mod:`erag_dagster.retrieval.kinds`): its name, the keys it reads
with their value rules, the default of each optional key it reads, its checks against the other
entries of the registry, the rewriting of its config as read (absolute paths, one spelling),
what its partition hash covers, the retrievers it builds on and the function that runs it.
:mod:`erag_dagster.config.registry` reads all but the defaults and the run (and must stay light: a
kind module imports no engine at module level that loads faiss, torch or pyserini);
:mod:`erag_dagster.evaluation.retrievers` calls the run, which reads the defaults.

Defaults are read at the point of use through :meth:`RetrieverKind.setting` and are never
written into the config, so a partition hash covers exactly the keys the entry states.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from erag_dagster.core.callbacks import Log
from erag_dagster.core.paths import storage_dir

if TYPE_CHECKING:
    import polars as pl

    from erag_dagster.retrieval.rerank import Scorer


class Rule(NamedTuple):
    """A key's value rule: ``check(value)`` is true for a good value; ``wanted`` ends the
    refusal line (``... it must be <wanted>``); ``schema``: what of the check a JSON schema
    can state (the eRAG component's ``defs.yaml`` schema carries it; the check decides)."""

    check: Callable[[Any], bool]
    wanted: str
    schema: Mapping[str, Any] | None = None


def is_number(value: Any) -> bool:
    """A finite int or float >= 0 (not a bool)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value < 1e308


def is_count(value: Any) -> bool:
    """An int >= 1 (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def is_text(value: Any) -> bool:
    """A non-empty string."""
    return isinstance(value, str) and value != ""


NUMBER = Rule(is_number, "a number >= 0", {"type": "number", "minimum": 0})
COUNT = Rule(is_count, "an integer >= 1", {"type": "integer", "minimum": 1})
MAX_LENGTH = Rule(lambda v: v is None or is_count(v), "an integer >= 1 or null")
DTYPE = Rule(
    lambda v: isinstance(v, str), "a dtype name such as float32 or auto", {"type": "string"}
)


def index_root() -> Path:
    """``<storage root>/indexes``: where built indexes live, named by the corpus content (and
    encoder), so each is built once per corpus and reused."""
    return storage_dir("indexes")


@dataclass
class RetrievalTiming:
    """Seconds spent building the index and searching (index time 0 when reused), and what a
    retriever reports about its run (``details``: run-file coverage, rerank cost, recall of an
    approximate index), shown as the run's metadata."""

    index_seconds: float = 0.0
    search_seconds: float = 0.0
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RunRequest:
    """One run asked of a kind: the registry entry (``name``, its resolved ``config``), the
    dataset's ``corpus`` and ``queries``, the cut-off ``k`` (>= 1) and what the registry-aware
    caller (:func:`erag_dagster.evaluation.retrievers.run_retriever`) lends: ``run_other(name, k,
    timing)`` runs another registry retriever, ``partition_key(name)`` names its partition,
    ``reader_scorer(name, overrides)`` scores with a registry reader, and ``asset_runs`` holds
    the upstream assets' values by retriever name (empty outside Dagster)."""

    kind: RetrieverKind
    name: str
    config: Mapping[str, Any]
    corpus: pl.DataFrame
    queries: pl.DataFrame
    k: int
    timing: RetrievalTiming
    log: Log | None
    threads: int
    question_subset: bool
    asset_runs: Mapping[str, object]
    run_other: Callable[[str, int, RetrievalTiming], pl.DataFrame]
    partition_key: Callable[[str], str]
    reader_scorer: Callable[[str, Mapping[str, Any]], Scorer]

    def setting(self, key: str) -> Any:
        """The config's ``key``, or the kind's default for it (:meth:`RetrieverKind.setting`)."""
        return self.kind.setting(self.config, key)


Check = Callable[
    [str, Mapping[str, Any], Mapping[str, Mapping[str, Any]], Collection[str], str], None
]
"""``check(name, config, retrievers, readers, path)``: refuse (``InputError``, one line naming
``path`` and ``name``) a config that its kind's keys and values allow but the registry does
not (a missing required key, an unknown reference); ``retrievers``: every raw retriever config
by name; ``readers``: the reader names."""
Resolve = Callable[[str, dict[str, Any], Path, str], None]
"""``resolve(name, config, folder, path)``: rewrite the config in place as it is stored and
hashed (paths made absolute against ``folder``, the registry's; one spelling of a value)."""
Identity = Callable[
    [Mapping[str, Any], Callable[[str], str], Callable[[str], str]], Mapping[str, Any]
]
"""``identity(config, digest_of, reader_digest)``: what the partition hash covers (module
docstring of :mod:`erag_dagster.config.registry`); ``digest_of(name)`` is another retriever's hash,
``reader_digest(name)`` a reader's."""


def _no_check(name: str, config: Mapping[str, Any], *_: Any) -> None:
    return None


def _unchanged(name: str, config: dict[str, Any], *_: Any) -> None:
    return None


def _whole_config(config: Mapping[str, Any], *_: Any) -> Mapping[str, Any]:
    return config


def _no_references(config: Mapping[str, Any]) -> list[str]:
    return []


@dataclass(frozen=True)
class RetrieverKind:
    """One retriever kind, registered once.

    ``keys``: the keys it reads besides ``kind`` and the registry's operational and scope keys,
    each with its value rule (``None``: any value); any other key is refused. ``defaults``: the
    value of each optional key when the entry leaves it out (read by :meth:`setting`, never
    hashed). ``run``: the run of :class:`RunRequest`'s entry, ``k`` rows per query at most.
    ``component_only``: only the eRAG Dagster component's registry may use it.
    """

    name: str
    keys: Mapping[str, Rule | None]
    run: Callable[[RunRequest], pl.DataFrame]
    defaults: Mapping[str, Any] = field(default_factory=dict)
    check: Check = _no_check
    resolve: Resolve = _unchanged
    identity: Identity = _whole_config
    references: Callable[[Mapping[str, Any]], list[str]] = _no_references
    component_only: bool = False

    def setting(self, config: Mapping[str, Any], key: str) -> Any:
        """``config[key]``, or this kind's default when the key is absent (``KeyError`` for a
        key without a default: a required key, which :attr:`check` ensures is present)."""
        return config[key] if key in config else self.defaults[key]
