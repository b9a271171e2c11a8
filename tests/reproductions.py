"""Reproduction entries (``reproductions/*.yaml``): loading them and computing each condition.

An entry states one figure: what is run (``condition``), on which ``dataset``, the ``metric``, the
``expected`` value, the ``tolerance`` (pass when ``|measured - expected| <= tolerance``), its
``source`` and, when the README or a docs page quotes it, the quoted phrase (``readme``) with the
number of decimals it is printed with (``digits``). ``reproductions/README.md`` describes the
format.

Each condition ``kind`` is computed by one function of :class:`Conditions` through the project's
own code paths (those the CLI and the assets call); expensive work (a retrieval run, a loaded
dataset) is cached on the :class:`Conditions` object, which the test keeps for the session, so
e.g. one SciFact BM25 run serves its three figures. This module holds no figure itself.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import polars as pl
import yaml

from tests.stats_fixture import STATS

REPO_ROOT = Path(__file__).resolve().parents[1]
REPRODUCTIONS_DIR = REPO_ROOT / "reproductions"
README = REPO_ROOT / "README.md"
#: the storage root of a real ``erag-dagster run`` whose report assets the default-run
#: entries are read from (see reproductions/default_run.yaml)
STORAGE_ENV = "ERAG_REPRO_STORAGE"
REQUIRED = ("id", "condition", "dataset", "metric", "expected", "tolerance", "source")


@dataclass(frozen=True)
class Reproduction:
    """One expected figure (see the module docstring for the fields)."""

    id: str
    file: str
    condition: dict[str, Any]
    dataset: str
    metric: str
    expected: float
    tolerance: float
    source: str
    readme: str | None = None
    digits: int | None = None
    slow: bool = False
    heavy: bool = False
    """Minutes of work on 2 cores (``make reproduce`` runs it; ``make test`` leaves it out)."""

    def passes(self, value: float) -> bool:
        """``|value - expected| <= tolerance``; NaN never passes."""
        return not math.isnan(value) and abs(value - self.expected) <= self.tolerance


def load_reproductions(folder: Path = REPRODUCTIONS_DIR) -> list[Reproduction]:
    """Every entry of every ``*.yaml`` in ``folder`` (file order, then entry order).

    A missing field, a non-numeric expected value or tolerance, a negative tolerance, a
    ``readme`` phrase without ``digits`` or a repeated id is a ``ValueError`` naming the file
    and the entry."""
    entries: list[Reproduction] = []
    seen: dict[str, str] = {}
    for path in sorted(folder.glob("*.yaml")):
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        for index, raw in enumerate(data.get("entries") or []):
            at = f"{path.name}: entry {index} ({raw.get('id', '?')})"
            missing = [k for k in REQUIRED if k not in raw]
            if missing:
                raise ValueError(f"{at}: missing {', '.join(missing)}")
            unknown = set(raw) - {*REQUIRED, "readme", "digits", "slow", "heavy"}
            if unknown:
                raise ValueError(f"{at}: unknown field(s) {', '.join(sorted(unknown))}")
            if raw["id"] in seen:
                raise ValueError(f"{at}: id also used in {seen[raw['id']]}")
            seen[raw["id"]] = path.name
            expected, tolerance = raw["expected"], raw["tolerance"]
            if not all(isinstance(x, int | float) for x in (expected, tolerance)) or tolerance < 0:
                raise ValueError(f"{at}: expected and tolerance must be numbers, tolerance >= 0")
            if raw.get("readme") is not None and raw.get("digits") is None:
                raise ValueError(f"{at}: a readme phrase needs digits")
            entries.append(
                Reproduction(
                    id=str(raw["id"]),
                    file=path.name,
                    condition=dict(raw["condition"]),
                    dataset=str(raw["dataset"]),
                    metric=str(raw["metric"]),
                    expected=float(expected),
                    tolerance=float(tolerance),
                    source=str(raw["source"]),
                    readme=raw.get("readme"),
                    digits=raw.get("digits"),
                    slow=bool(raw.get("slow", False)),
                    heavy=bool(raw.get("heavy", False)),
                )
            )
    return entries


# --- the README and the docs pages quote them ------------------------------------------------


def quoting_pages(root: Path = REPO_ROOT) -> list[Path]:
    """The pages a ``readme`` phrase may be quoted on: ``README.md`` and every Markdown page of
    the docs site (``docs/**/*.md``), in that order."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def normalise_text(text: str) -> str:
    """Whitespace runs (line breaks included) to one space, the minus sign U+2212 to ``-``."""
    return re.sub(r"\s+", " ", text.replace("\u2212", "-")).strip()


def readme_mismatches(
    entries: list[Reproduction], pages: Path | Sequence[Path] | None = None
) -> list[str]:
    """One line per entry whose ``readme`` phrase occurs on none of ``pages`` (default:
    :func:`quoting_pages`, i.e. README.md and docs/**/*.md; a phrase must lie within one page),
    or whose phrase lacks the expected value printed with ``digits`` decimals; empty when the
    pages and the data agree."""
    if pages is None:
        pages = quoting_pages()
    elif isinstance(pages, Path):
        pages = [pages]
    texts = [normalise_text(page.read_text(encoding="utf-8")) for page in pages]
    names = ", ".join(page.name for page in pages) if len(pages) <= 3 else "README.md, docs/**/*.md"
    problems = []
    for entry in entries:
        if entry.readme is None:
            continue
        phrase = normalise_text(entry.readme)
        printed = f"{entry.expected:.{entry.digits}f}"
        if not any(phrase in text for text in texts):
            problems.append(f"{entry.file}: {entry.id}: no page quotes {phrase!r} ({names})")
        elif printed not in phrase:
            problems.append(
                f"{entry.file}: {entry.id}: expected {printed} is not in the quoted phrase "
                f"{phrase!r}"
            )
    return problems


# --- computing conditions -------------------------------------------------------------------


class Skip(Exception):
    """The condition cannot be computed here (the reason is the message)."""


def kilt_records(path: Path) -> list[dict[str, Any]]:
    """The records of a KILT JSON-lines file, as KILT's ``load_data`` reads them."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def kilt_gold_answers(record: dict[str, Any]) -> list[str]:
    """KILT's ``get_gold_answers``: the stripped non-empty answers of every output (a set)."""
    answers = {
        out["answer"].strip()
        for out in record["output"]
        if out.get("answer") and out["answer"].strip()
    }
    return sorted(answers)


@dataclass
class Conditions:
    """Computes entries' conditions, caching runs and datasets (keep one per session)."""

    shared_data: Path
    _cache: dict[tuple[Any, ...], Any] = field(default_factory=dict)

    def path(self, template: str) -> str:
        return template.replace("{shared}", str(self.shared_data))

    def _cached(self, key: tuple[Any, ...], make: Callable[[], Any]) -> Any:
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    def value(self, entry: Reproduction) -> float:
        """The measured value of ``entry``'s condition; raises :class:`Skip` when it cannot
        be computed here."""
        kind = entry.condition.get("kind")
        handler = self.KINDS.get(kind)
        if handler is None:
            raise ValueError(f"{entry.file}: {entry.id}: unknown condition kind {kind!r}")
        return float(handler(self, entry))

    def dataset(self, spec: str):
        from erag_dagster.data.loaders import load_dataset

        return self._cached(("dataset", spec), lambda: load_dataset(self.path(spec)))

    def retrieval(self, entry: Reproduction) -> float:
        """``erag-dagster retrieve`` + ``evaluate-run``: the registry retriever through
        ``run_retriever`` (index under the current storage root), scored by ``evaluate_run``."""
        from erag_dagster.config.registry import load_registry
        from erag_dagster.evaluation.retrievers import run_retriever
        from erag_dagster.metrics.human import evaluate_run

        cond = entry.condition
        ds = self.dataset(entry.dataset)
        key = ("run", entry.dataset, cond["retriever"], int(cond["k"]))
        run = self._cached(
            key,
            lambda: run_retriever(
                load_registry(), cond["retriever"], ds.corpus, ds.queries, int(cond["k"])
            ),
        )
        level = int(cond.get("relevance_level", 1))
        report = evaluate_run(ds.qrels, run, [entry.metric], relevance_level=level)
        return report.aggregate[entry.metric]

    def trec_run(self, entry: Reproduction) -> float:
        """``erag-dagster evaluate-run`` on files: ``read_trec_run`` + ``read_trec_qrels``."""
        from erag_dagster.metrics.human import evaluate_run, read_trec_qrels
        from erag_dagster.retrieval.runs import read_trec_run

        cond = entry.condition
        run = read_trec_run(self.path(cond["run"]))
        qrels = read_trec_qrels(Path(self.path(cond["qrels"])))
        level = int(cond.get("relevance_level", 1))
        return evaluate_run(qrels, run, [entry.metric], relevance_level=level).aggregate[
            entry.metric
        ]

    def kilt_downstream(self, entry: Reproduction) -> float:
        """Mean over records of the project's downstream metric (``entry.metric``) of the
        guess's first answer (stripped) against the gold record's answers, as KILT's
        ``eval_downstream.evaluate``."""
        from erag_dagster.metrics.downstream import get_downstream_metric

        golds = kilt_records(Path(self.path(entry.condition["gold"])))
        guesses = kilt_records(Path(self.path(entry.condition["guess"])))
        if [g["id"] for g in golds] != [p["id"] for p in guesses]:
            raise ValueError(f"{entry.id}: gold and guess ids differ")
        metric = get_downstream_metric(entry.metric)
        scores = [
            metric(str(guess["output"][0]["answer"]).strip(), kilt_gold_answers(gold))
            for gold, guess in zip(golds, guesses, strict=True)
        ]
        return sum(scores) / len(scores)

    def dataset_size(self, entry: Reproduction) -> float:
        """Rows of the loaded dataset's ``table`` (corpus, queries or qrels)."""
        return getattr(self.dataset(entry.dataset), entry.condition["table"]).height

    def report_asset(self, entry: Reproduction) -> float:
        """A value of a report asset a real ``erag-dagster run`` wrote under
        ``$ERAG_REPRO_STORAGE/assets`` (a parquet table, or a JSON list of rows such as the
        ``fit`` asset's): the rows matching ``where``, then ``column``'s only value
        (``aggregate: only``) or its largest non-NaN value (``aggregate: max``)."""
        root = os.environ.get(STORAGE_ENV)
        if not root:
            raise Skip(
                f"{STORAGE_ENV} is not set: default-run figures are read from a real "
                "`erag-dagster run`'s storage (a full run takes ~16 minutes)"
            )
        cond = entry.condition
        path = Path(root) / "assets" / f"{cond['asset']}.parquet"
        rows = path.with_suffix(".json")  # an asset stored as a list of rows (the fit's)
        if not path.is_file() and not rows.is_file():
            raise FileNotFoundError(f"{STORAGE_ENV}={root}: no report asset {path}")
        from erag_dagster.evaluation.checks import (
            report_value,  # the rule the readme_figures check uses
        )

        if path.is_file():
            frame = pl.read_parquet(path)
        else:
            path = rows
            frame = pl.DataFrame(json.loads(rows.read_text(encoding="utf-8")), strict=False)
        try:
            return report_value(frame, cond)
        except ValueError as error:
            raise ValueError(f"{entry.id}: {path.name}: {error}") from None

    def label_table1(self, entry: Reproduction) -> float:
        """A Table-1 figure recomputed from stored labels: ``labels.parquet`` and
        ``end_to_end.parquet`` in the folder ``data`` (written by
        ``scripts/measure_label_methods.py``) through ``label_methods_table``; the ``column``
        (``kendall_tau``, ``kendall_low``, ...) of the row ``method`` x ``list_metric``."""
        from erag_dagster.meta.correlation_report import label_methods_table

        cond = entry.condition
        folder = REPO_ROOT / cond["data"]
        k = int(cond["k"])

        def table() -> pl.DataFrame:
            labels = pl.read_parquet(folder / "labels.parquet")
            e2e = pl.read_parquet(folder / "end_to_end.parquet")
            return label_methods_table(labels, e2e, k, entry.dataset, STATS)

        frame = self._cached(("label_table1", str(folder), k), table)
        row = frame.filter(
            (pl.col("method") == cond["method"]) & (pl.col("metric") == cond["list_metric"])
        )
        if row.height != 1:
            raise ValueError(f"{entry.id}: {row.height} rows for {cond['method']} x "
                             f"{cond['list_metric']}")  # fmt: skip
        return float(row[cond["column"]][0])

    def reference_agreement(self, entry: Reproduction) -> float:
        """How often a no-gold reference agrees with gold, from ``references.parquet`` in the
        folder ``data`` (written by ``scripts/measure_no_gold.py``): the mean over the
        ``split`` half's queries of ``gold_score`` (the reference answer scored against the
        gold answers with the set's metric) of ``reference``, or with ``column`` ``low`` /
        ``high`` its 95% percentile bootstrap CI (1000 resamples, seed 0)."""
        from erag_dagster.config.evaluation import EvaluationConfig
        from erag_dagster.stats.significance import bootstrap_mean_ci

        cond = entry.condition
        frame = pl.read_parquet(REPO_ROOT / cond["data"] / "references.parquet").filter(
            (pl.col("reference") == cond["reference"]) & (pl.col("split") == cond["split"])
        )
        values = frame["gold_score"].to_numpy()
        if not len(values):
            raise ValueError(f"{entry.id}: no row for {cond['reference']} / {cond['split']}")
        column = cond.get("column", "mean")
        if column == "mean":
            return float(values.mean())
        low, high = bootstrap_mean_ci(values, EvaluationConfig().statistics)
        return float({"low": low, "high": high}[column])

    def system_difference(self, entry: Reproduction) -> float:
        """The paired difference ``plus − minus`` between two retrievers' per-query ``metric``
        under one labelling ``method`` (or ``end_to_end`` / ``e2e``), from ``systems.parquet``
        in the folder ``data`` (``scripts/measure_no_gold.py --compare``), over the ``split``
        half: its mean, or with ``column`` ``low`` / ``high`` its 95% percentile bootstrap CI
        (1000 resamples, seed 0)."""
        from erag_dagster.config.evaluation import EvaluationConfig
        from erag_dagster.stats.significance import bootstrap_mean_ci

        cond = entry.condition
        frame = pl.read_parquet(REPO_ROOT / cond["data"] / "systems.parquet").filter(
            (pl.col("method") == cond["method"])
            & (pl.col("metric") == cond["metric"])
            & (pl.col("split") == cond["split"])
        )
        wide = frame.pivot("retriever", index="query_id", values="value").sort("query_id")
        values = (wide[cond["plus"]] - wide[cond["minus"]]).to_numpy()
        if not len(values):
            raise ValueError(f"{entry.id}: no rows for {cond['method']} / {cond['metric']}")
        column = cond.get("column", "mean")
        if column == "mean":
            return float(values.mean())
        low, high = bootstrap_mean_ci(values, EvaluationConfig().statistics)
        return float({"low": low, "high": high}[column])

    def label_auc(self, entry: Reproduction) -> float:
        """A prompt-tuning figure recomputed from stored per-pair labels: the rows of the
        parquet file ``data`` (written by ``scripts/tune_prompts.py``) matching ``where``
        (column -> value), then ``column``: ``auc``, ``auc_low``, ``auc_high`` (label vs
        judgment AUC and its 95% bootstrap CI over questions, the fit diagnostics' own
        :func:`~erag_dagster.meta.fit.separation`, 1000 resamples, seed 0), ``cut_share`` or
        ``words`` (means over the pairs)."""
        from erag_dagster.config.evaluation import EvaluationConfig
        from erag_dagster.meta.fit import separation

        cond = entry.condition
        frame = self._cached(
            ("label_auc", cond["data"]), lambda: pl.read_parquet(REPO_ROOT / cond["data"])
        )
        for column, value in cond["where"].items():
            frame = frame.filter(pl.col(column) == value)
        if frame.height == 0:
            raise ValueError(f"{entry.id}: no rows match {cond['where']}")
        column = cond["column"]
        if column in ("cut_share", "words"):
            return float(
                frame[{"cut_share": "cut", "words": "words"}[column]].cast(pl.Float64).mean()
            )
        found = separation(
            frame.select("query_id", "label", "relevant"), EvaluationConfig().statistics
        )
        return float({"auc": found.auc, "auc_low": found.low, "auc_high": found.high}[column])

    KINDS: ClassVar[dict[str, Callable[[Conditions, Reproduction], float]]] = {
        "retrieval": retrieval,
        "trec_run": trec_run,
        "kilt_downstream": kilt_downstream,
        "dataset_size": dataset_size,
        "report_asset": report_asset,
        "label_table1": label_table1,
        "reference_agreement": reference_agreement,
        "system_difference": system_difference,
        "label_auc": label_auc,
    }
