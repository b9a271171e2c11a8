"""Every figure in ``reproductions/*.yaml``, recomputed by the project's code and compared.

One parametrised test, one case per entry (id = the entry's id); ``slow: true`` entries carry
the ``slow`` marker, ``heavy: true`` ones (minutes of work: SciFact's dense encoding) the
``heavy`` marker, which ``make test`` leaves out and ``make reproduce`` runs. Conditions are
computed by :class:`tests.reproductions.Conditions`, kept for the session, so entries sharing a
run (SciFact BM25's three figures) compute it once. Indexes go to a storage root private to
this session. Default-run entries read the report assets of a real run
(``$ERAG_REPRO_STORAGE``) and skip without it; see reproductions/default_run.yaml.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from tests.reproductions import (
    REPO_ROOT,
    STORAGE_ENV,
    Conditions,
    Reproduction,
    Skip,
    load_reproductions,
    quoting_pages,
    readme_mismatches,
)

ENTRIES = load_reproductions()


@pytest.fixture(scope="session")
def conditions(shared_data: Path) -> Conditions:
    return Conditions(shared_data)


@pytest.fixture(scope="session")
def repro_storage(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One storage root (indexes) for every entry of the session, set only while computing."""
    return tmp_path_factory.mktemp("repro-storage")


@pytest.mark.parametrize(
    "entry",
    [
        pytest.param(
            e,
            id=e.id,
            marks=[
                *([pytest.mark.slow] if e.slow else []),
                *([pytest.mark.heavy] if e.heavy else []),
            ],
        )
        for e in ENTRIES
    ],
)
def test_reproduction(
    conditions: Conditions,
    repro_storage: Path,
    monkeypatch: pytest.MonkeyPatch,
    entry: Reproduction,
) -> None:
    monkeypatch.setenv("ERAG_STORAGE", str(repro_storage))
    try:
        value = conditions.value(entry)
    except Skip as reason:
        pytest.skip(str(reason))
    assert entry.passes(value), (
        f"{entry.file}: {entry.id}: {entry.metric} on {entry.dataset} = {value!r}, expected "
        f"{entry.expected} ± {entry.tolerance} ({entry.source})"
    )


def test_entries_cover_every_file_and_kind() -> None:
    files = {p.name for p in (REPO_ROOT / "reproductions").glob("*.yaml")}
    assert files == {e.file for e in ENTRIES}, "a reproductions file without entries"
    assert {e.condition["kind"] for e in ENTRIES} <= set(Conditions.KINDS)


def test_readme_quotes_every_figure_with_the_same_digits() -> None:
    """Every quoted figure is on README.md or a docs page (docs/**/*.md), with its digits."""
    assert readme_mismatches(ENTRIES) == []


def test_readme_check_reports_a_drifted_figure(tmp_path: Path) -> None:
    """A figure drifted on the page that quotes it is reported; the other pages are read too."""
    pages = quoting_pages()
    assert pages[0].name == "README.md" and any(p.parent.name == "docs" for p in pages)
    quoted = next(e for e in ENTRIES if e.readme is not None)
    printed = f"{quoted.expected:.{quoted.digits}f}"
    drifted = []
    for page in pages:
        text = page.read_text(encoding="utf-8")
        copy = tmp_path / f"{len(drifted)}-{page.name}"
        copy.write_text(text.replace(printed, "9" * len(printed)), encoding="utf-8")
        drifted.append(copy)
    assert readme_mismatches([quoted], pages) == []
    problems = readme_mismatches([quoted], drifted)
    assert len(problems) == 1 and quoted.id in problems[0]


def test_readme_check_finds_a_phrase_on_a_docs_page_only(tmp_path: Path) -> None:
    """A phrase quoted only by a docs page passes; one quoted by no page is reported."""
    quoted = next(e for e in ENTRIES if e.readme is not None)
    readme, page = tmp_path / "README.md", tmp_path / "page.md"
    readme.write_text("no figures here\n", encoding="utf-8")
    page.write_text(f"intro\n\n{quoted.readme}\n", encoding="utf-8")
    assert readme_mismatches([quoted], [readme, page]) == []
    problems = readme_mismatches([quoted], [readme])
    assert len(problems) == 1 and "no page quotes" in problems[0]


def test_check_readme_figures_script_exits_zero() -> None:
    done = subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / "check_readme_figures.py")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "figures" in done.stdout


def test_report_asset_reads_the_matching_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """How default-run entries read a stored report: a registry name matches its partition keys
    and "<key> / <reader>" system names; ``only`` wants one row, ``max`` takes the largest
    defined value."""
    assets = tmp_path / "assets"
    assets.mkdir()
    pl.DataFrame(
        {
            "retriever": [
                "bm25-1a2b3c4d / r-9",
                "bm25-1a2b3c4d / r-9",
                "dense-5e6f / r-9",
                "hybrid-7a8b / r-9",
            ],
            "method": ["eRAG", "containment", "containment", "containment"],
            "kendall_tau": [0.5, 0.1, 0.2, float("nan")],  # NaN: tau of a constant column
        }
    ).write_parquet(assets / "correlation_report.parquet")
    entry = next(e for e in ENTRIES if e.condition["kind"] == "report_asset")

    def measured(**condition) -> float:
        probe = dataclasses.replace(entry, condition={"kind": "report_asset", **condition})
        return Conditions(tmp_path).value(probe)

    monkeypatch.delenv(STORAGE_ENV, raising=False)
    with pytest.raises(Skip, match=STORAGE_ENV):
        measured(asset="correlation_report", column="kendall_tau")
    monkeypatch.setenv(STORAGE_ENV, str(tmp_path))
    only = {"method": "eRAG", "retriever": "bm25"}
    assert measured(asset="correlation_report", where=only, column="kendall_tau") == 0.5
    most = {"method": ["containment", "x"]}
    assert measured(
        asset="correlation_report", where=most, column="kendall_tau", aggregate="max"
    ) == pytest.approx(0.2)
    with pytest.raises(ValueError, match="2 rows"):
        measured(asset="correlation_report", where={"retriever": "bm25"}, column="kendall_tau")
    with pytest.raises(FileNotFoundError, match="erag_report"):
        measured(asset="erag_report", column="P@3")
