"""The regression gate (erag_dagster/gate, ``erag-dagster compare`` / ``baseline``).

Real parts throughout: BM25 (pyserini) on the embedded sample (20 questions spread over it),
eRAG labels from the packaged SmolLM2 reader (the registry's first reader) with the
``contains`` downstream metric, the real label store. One store is shared by the module, so
each (question, document text) pair is answered once: the baseline's 60 pairs; every other
case (the changes below, the renamed doc ids, the workflow) reuses them — which is itself what
the gate promises (and keeps this module to one labelling pass).

Changes built to be judged:

- *worse*: BM25's top 3 without the documents whose text contains a gold answer (a retriever
  that lost the answer-bearing passages; a query left with none is an empty list);
- *the same*: the candidate is BM25's own top 3 as a run file (every difference 0);
- *reversed*: BM25's top 3 in reverse order (the same pairs: Success@3 unchanged, RR lower).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
import yaml

from erag_dagster.cli import main
from erag_dagster.core.errors import InputError, StorageError
from erag_dagster.gate import (
    EXIT_GATE_FAILED,
    GateRule,
    GateSettings,
    compare,
    make_baseline,
)
from erag_dagster.gate.render import to_json, to_markdown, to_text
from erag_dagster.labels.store import open_store
from tests.answer_seed import shared_answers
from tests.stats_fixture import STATS, stats

REPO_ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = REPO_ROOT / "docs" / "examples" / "erag-gate.yml"
DATASET = "sample?spread_questions=20"
K = 3
METRICS = ("nDCG@3", "RR", "Success@3")
GATE_ARGS = ["--dataset", DATASET, "--metric", "contains", "--k", str(K)]
GATE_ARGS += ["--metrics", ",".join(METRICS)]


class Gate:
    """The module's shared files: the label store, the runs and the stored baseline."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.store = root / "labels.sqlite"
        self.baseline = root / "baseline.json"
        self.same = root / "bm25-top3.trec"
        self.reversed = root / "bm25-reversed.trec"
        self.worse = root / "bm25-without-answers.trec"

    def settings(self, **changes) -> GateSettings:
        base = {
            "dataset": DATASET,
            "metric": "contains",
            "list_metrics": METRICS,
            "label_k": K,
            "store": str(self.store),
        }
        return GateSettings(**(base | changes))

    def cli(self, *args: str) -> list[str]:
        return [*args, *GATE_ARGS, "--store", str(self.store)]


def _write_run(frame: pl.DataFrame, path: Path) -> None:
    from erag_dagster.retrieval.runs import write_trec_run

    write_trec_run(frame, path, tag=path.stem)


def _without_answers(run: pl.DataFrame, ds) -> pl.DataFrame:
    """``run`` without the rows whose document text contains one of the query's gold answers
    (case-insensitive)."""
    rows = run.join(ds.corpus.select("doc_id", "text"), on="doc_id").join(
        ds.queries.select("query_id", "answers"), on="query_id"
    )
    keep = [
        not any(a.lower() in text.lower() for a in answers)
        for text, answers in rows.select("text", "answers").iter_rows()
    ]
    kept = rows.filter(pl.Series(keep)).select(run.columns)
    assert 0 < kept.height < run.height
    return kept


@pytest.fixture(scope="module")
def reader():
    from erag_dagster.config.registry import load_registry
    from erag_dagster.readers.factory import reader_from_config

    entry = next(iter(load_registry().readers.values()))
    return reader_from_config(entry.name, entry.config)


@pytest.fixture(scope="module")
def gate(tmp_path_factory: pytest.TempPathFactory, reader) -> Gate:
    """Runs built from BM25's top 3, and the baseline (that top 3) stored."""
    from erag_dagster.config.registry import load_registry
    from erag_dagster.data.loaders import load_dataset
    from erag_dagster.evaluation.retrievers import run_retriever

    root = tmp_path_factory.mktemp("gate")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ERAG_STORAGE", str(root / "storage"))
        found = Gate(root)
        ds = load_dataset(DATASET)
        top = run_retriever(load_registry(), "bm25", ds.corpus, ds.queries, K,
                            question_subset=True)  # fmt: skip
        _write_run(top, found.same)
        _write_run(top.with_columns(pl.col("score") * -1), found.reversed)
        _write_run(_without_answers(top, ds), found.worse)
        with shared_answers(tmp_path_factory, found.store):
            made = make_baseline("bm25", found.baseline, found.settings(), reader=reader)
        assert made.judged_now + made.from_store == 20 * K
        yield found


@pytest.fixture()
def storage_env(gate: Gate, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ERAG_STORAGE", str(gate.root / "storage"))


def test_a_change_built_to_be_worse_is_worse(gate: Gate, reader, storage_env) -> None:
    result = compare(str(gate.baseline), str(gate.worse), gate.settings(), reader=reader)
    assert result.verdict == "worse"
    assert [v.metric for v in result.metrics] == list(METRICS)
    for v in result.metrics:
        assert v.verdict == "worse" and v.n == 20
        assert v.difference == pytest.approx(v.candidate - v.baseline)
        assert v.ci_low <= v.difference <= v.ci_high < 0
        assert v.p <= v.p_holm < 0.05
    # the stored baseline is used as stored (no reader call); the candidate's pairs are its
    assert result.baseline.stored and result.baseline.judged_now == 0
    assert result.candidate.judged_now == 0 and 0 < result.candidate.from_store < 20 * K
    # a margin wider than the whole drop turns "worse" into "indistinguishable"
    wide = compare(str(gate.baseline), str(gate.worse), gate.settings(),
                   GateRule(margin=0.99), reader=reader)  # fmt: skip
    assert wide.verdict == "indistinguishable" and wide.candidate.judged_now == 0
    # swapped, the same change is "better"
    back = compare(str(gate.worse), str(gate.baseline), gate.settings(), reader=reader)
    assert back.verdict == "better"


def test_the_same_ranking_is_indistinguishable(gate: Gate, reader, storage_env) -> None:
    result = compare(str(gate.baseline), str(gate.same), gate.settings(), reader=reader)
    assert result.verdict == "indistinguishable"
    for v in result.metrics:
        assert (v.difference, v.ci_low, v.ci_high, v.p_holm) == (0.0, 0.0, 0.0, 1.0)
    assert result.candidate.judged_now == 0 and result.candidate.from_store == 20 * K
    # the stored baseline's numbers are those of BM25 evaluated now
    now = compare("bm25", str(gate.same), gate.settings(), reader=reader)
    assert now.baseline.aggregate == result.baseline.aggregate
    assert now.notes == [] and now.baseline.judged_now == 0


def test_reversed_ranking_changes_rank_metrics_only(gate: Gate, reader, storage_env) -> None:
    result = compare(str(gate.baseline), str(gate.reversed), gate.settings(), reader=reader)
    by = {v.metric: v for v in result.metrics}
    assert by["Success@3"].difference == 0.0 and by["Success@3"].verdict == "indistinguishable"
    assert by["RR"].difference < 0 and by["nDCG@3"].difference < 0
    assert result.candidate.judged_now == 0  # the same pairs, all in the store


def test_cli_exit_codes_and_formats(gate: Gate, storage_env, capsys) -> None:
    worse = gate.cli("compare", "--baseline", str(gate.baseline), "--candidate", str(gate.worse))
    assert main([*worse, "--fail-if", "worse", "--json"]) == EXIT_GATE_FAILED == 3
    out, err = capsys.readouterr()
    data = json.loads(out)
    assert data["verdict"] == "worse"
    assert [m["verdict"] for m in data["metrics"]] == ["worse"] * 3
    assert data["baseline"]["identity"] == data["candidate"]["identity"]
    assert "gate failed: the candidate is worse" in err
    summary = gate.root / "summary.md"
    assert main([*worse, "--markdown", "--output", str(summary)]) == 0  # no --fail-if: 0
    out, _ = capsys.readouterr()
    assert out.startswith("### eRAG retrieval gate: ❌ worse")
    assert "| metric" in out and "| RR " in out and out.count("❌ worse") == 4
    assert summary.read_text(encoding="utf-8") == out
    same = gate.cli("compare", "--baseline", str(gate.baseline), "--candidate", str(gate.same))
    assert main([*same, "--fail-if", "worse"]) == 0
    out, _ = capsys.readouterr()
    assert ": INDISTINGUISHABLE (margin 0," in out.splitlines()[0]
    assert main([*same, "--fail-if", "worse-or-indistinguishable"]) == EXIT_GATE_FAILED


def test_renderers_carry_the_verdict(gate: Gate, reader, storage_env) -> None:
    result = compare(str(gate.baseline), str(gate.reversed), gate.settings(), reader=reader)
    assert json.loads(to_json(result))["verdict"] == result.verdict
    assert result.verdict.upper() in to_text(result).splitlines()[0]
    assert f"**{result.verdict}**" in to_markdown(result)


def test_the_gate_shows_the_fit_diagnostics(gate: Gate, reader, storage_env) -> None:
    """Each labelled side carries its fit diagnostics (issue 34): the real ones in the JSON,
    and a warning line in the text and markdown when the answers were cut."""
    import dataclasses

    result = compare(str(gate.baseline), str(gate.reversed), gate.settings(), reader=reader)
    fit = result.candidate.fit
    assert fit is not None and fit.answers == result.candidate.labels.height
    assert json.loads(to_json(result))["candidate"]["fit"]["answers"] == fit.answers
    cut = dataclasses.replace(fit, cut_answers=fit.answers)  # every answer at max_new_tokens
    shown = dataclasses.replace(result, candidate=dataclasses.replace(result.candidate, fit=cut))
    text, md = to_text(shown), to_markdown(shown)
    assert "fit warning" in text and "max_new_tokens" in text
    assert "fit warning" in md and "max\\_new\\_tokens" in md


def test_the_gate_and_the_api_share_retrieve_and_label(gate: Gate, reader, storage_env) -> None:
    """One retrieve -> label -> fit (evaluation/systems.py, issue 31): the Python API's way —
    retrieve at the config's k, label its top label_k, diagnose — finds the gate's candidate
    rows, labels and fit exactly, every answer from the store the gate filled. The gate
    retrieves at its labelled depth (its config's k is its label_k), as it always has."""
    from erag_dagster.config.registry import load_registry
    from erag_dagster.data.loaders import load_dataset
    from erag_dagster.evaluation import systems
    from erag_dagster.gate.compare import _Context
    from erag_dagster.labels.audit import evaluation_id

    settings = gate.settings()
    ctx = _Context(settings, reader)
    try:
        assert (ctx.config.k, ctx.config.label_k) == (K, K)
    finally:
        ctx.close()
    registry = load_registry()
    config = registry.evaluation.with_overrides(
        "test", dataset=DATASET, label_k=K, metric="contains", list_metrics=list(METRICS)
    )
    assert config.k > K  # the API retrieves deeper than it labels
    ds = load_dataset(DATASET)
    run = systems.retrieve(registry, "bm25", ds.corpus, ds.queries, config)
    assert run.group_by("query_id").len().get_column("len").max() > K
    with open_store(str(gate.store)) as store:
        api_side = systems.label_system(
            run, ds, reader, config, store, executor=registry.generation,
            producer=evaluation_id("api"), reader_name=str(reader.name), retriever="bm25",
        )  # fmt: skip
    assert (api_side.judged_now, api_side.from_store) == (0, 20 * K)
    gate_side = compare(str(gate.baseline), "bm25", settings, reader=reader).candidate
    columns = ["query_id", "doc_id", "rank", "label"]
    ours = api_side.labels.select(columns).sort("query_id", "rank")
    assert ours.equals(gate_side.labels.select(columns).sort("query_id", "rank"))
    assert gate_side.fit is not None and api_side.fit.metric == "contains"
    assert api_side.fit.as_dict() == gate_side.fit.as_dict()


def test_options_contradicting_a_stored_baseline_are_refused(
    gate: Gate, reader, storage_env, capsys
) -> None:
    """An option given that contradicts a stored baseline is one line naming the option (a
    left-out option takes the stored value); before any retrieval or reader call."""
    with pytest.raises(InputError, match=r"^--k 2 contradicts the stored baseline .*\(k 3\)"):
        compare(str(gate.baseline), str(gate.same), gate.settings(label_k=2), reader=reader)
    with pytest.raises(InputError, match=r"^--metric em contradicts .*downstream_metric contains"):
        compare(str(gate.baseline), "bm25", gate.settings(metric="em"), reader=reader)
    settled = compare(str(gate.baseline), str(gate.same), GateSettings(store=str(gate.store)),
                      reader=reader)  # fmt: skip
    assert settled.candidate.identity == settled.baseline.identity
    other = ["--dataset", "sample?spread_questions=12", "--metrics", "RR"]
    args = ["compare", "--baseline", str(gate.baseline), "--candidate", str(gate.same)]
    assert main([*gate.cli(*args), *other]) == 2
    _, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "--metrics RR contradicts" in lines[0], lines
    assert "(metrics nDCG@3,RR,Success@3)" in lines[0]


def test_bad_refs_are_one_line(gate: Gate, storage_env, capsys, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "something else"}', encoding="utf-8")
    for ref, expected in [
        ("no-such-retriever", "unknown retriever 'no-such-retriever'"),
        (str(tmp_path / "missing.trec"), "no such file"),
        (str(bad), "not an erag-dagster gate baseline"),
    ]:
        args = gate.cli("compare", "--baseline", str(gate.baseline), "--candidate", ref)
        assert main(args) == 2
        _, err = capsys.readouterr()
        assert len(err.strip().splitlines()) == 1 and expected in err


def test_unknown_candidate_queries_are_refused_or_named(
    gate: Gate, reader, storage_env, tmp_path: Path, capsys
) -> None:
    """Rows of queries the dataset lacks (a typo, a look-alike with U+200B, one outside the
    spec's 20 questions) are never scored silently: refused naming ``file:line`` and the
    option; with ``--drop-unknown-queries`` left out and every one named (notes, JSON), the
    rest compared as usual (all from the store)."""
    from erag_dagster.data.loaders import load_dataset

    same = gate.same.read_text()
    first = same.split()[0]
    outside = next(q for q in load_dataset("sample").queries["query_id"] if q not in same)
    doc = same.split()[2]
    extra = "".join(f"{q} Q0 {doc} 1 9.0 x\n" for q in ("zz-typo", first + "\u200b", outside))
    candidate = tmp_path / "with-unknown.trec"
    candidate.write_text(same + extra)
    args = gate.cli("compare", "--baseline", str(gate.baseline), "--candidate", str(candidate))
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--drop-unknown-queries" in err
    assert f"with-unknown.trec:{same.count(chr(10)) + 1}: query_id 'zz-typo'" in err
    assert main([*args, "--drop-unknown-queries", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    named = sorted(["zz-typo", first + "\u200b", outside])
    assert data["candidate"]["left_out_queries"] == named
    assert data["verdict"] == "indistinguishable" and data["candidate"]["judged_now"] == 0
    (note,) = [n for n in data["notes"] if "--drop-unknown-queries" in n]
    assert "names 3 queries that are not queries of" in note
    assert all(repr(q) in note for q in named), note
    result = compare(str(gate.baseline), str(candidate),
                     gate.settings(drop_unknown_queries=True), reader=reader)  # fmt: skip
    assert result.candidate.left_out == tuple(named)
    assert "'zz-typo'" in to_text(result)
    assert "\\'zz\\-typo\\'" in to_markdown(result)  # markdown: escaped as plain text


def test_renamed_doc_ids_reuse_every_label(gate: Gate, reader, storage_env, tmp_path) -> None:
    """A copy of the sample with every doc id renamed, re-indexed and retrieved again: the
    reader answers nothing new and the store gains no row."""
    from erag_dagster.config.registry import load_registry
    from erag_dagster.data.loaders import load_dataset
    from erag_dagster.evaluation.retrievers import run_retriever
    from erag_dagster.labels.labeller import label_run

    ds = load_dataset(DATASET)
    folder = tmp_path / "renamed"
    folder.mkdir()
    renamed = pl.col("doc_id").map_elements(lambda d: f"re-ingested/{d[::-1]}", pl.String)
    ds.corpus.with_columns(renamed).write_parquet(folder / "corpus.parquet")
    ds.queries.write_parquet(folder / "queries.parquet")
    ds.qrels.with_columns(renamed).write_parquet(folder / "qrels.parquet")
    copy = load_dataset(f"parquet:{folder}")
    assert set(copy.corpus["doc_id"]).isdisjoint(ds.corpus["doc_id"])
    run = run_retriever(load_registry(), "bm25", copy.corpus, copy.queries, K)
    store = open_store(gate.store)
    rows = store.count_generations()
    result = label_run(run, copy.queries, copy.corpus, reader, "contains", store)
    assert result.judged_now == 0 and result.from_store == 20 * K
    assert store.count_generations() == rows
    original = compare(str(gate.baseline), str(gate.same), gate.settings(), reader=reader)
    assert sorted(result.labels["label"]) == sorted(original.candidate.labels["label"])


# -- the documented GitHub Actions workflow, run on the sample --------------------------------


def _workflow_steps() -> tuple[dict[str, str], list[dict]]:
    workflow = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    (job,) = workflow["jobs"].values()
    env = {**workflow.get("env", {}), **job.get("env", {})}
    return {k: str(v) for k, v in env.items()}, job["steps"]


def _run_workflow(repo: Path, summary: Path) -> list[tuple[str, int]]:
    """Every ``run:`` step in order (``uses:`` steps and the ``install`` step skipped: this
    environment is installed); after a failure only ``if: always()`` steps run, as on GitHub."""
    env, steps = _workflow_steps()
    bin_dir = str(Path(sys.executable).parent)
    proc_env = {
        **os.environ,
        **env,
        "GITHUB_STEP_SUMMARY": str(summary),
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": str(REPO_ROOT),
    }
    done: list[tuple[str, int]] = []
    failed = False
    for step in steps:
        if "uses" in step or step.get("id") == "install":
            continue
        if failed and "always()" not in str(step.get("if", "")):
            continue
        proc = subprocess.run(["bash", "-e", "-c", step["run"]], cwd=repo, env=proc_env,
                              capture_output=True, text=True, timeout=900)  # fmt: skip
        done.append((step.get("name", step["run"][:20]), proc.returncode))
        failed = failed or proc.returncode != 0
        if proc.returncode not in (0, EXIT_GATE_FAILED):
            pytest.fail(f"step {step.get('name')!r} exited {proc.returncode}: {proc.stderr}")
    return done


def _repo(gate: Gate, root: Path, candidate_run: Path) -> Path:
    """A repository as the workflow expects it, with the label store the cache restored."""
    from erag_dagster.config.registry import default_registry_path

    packaged = yaml.safe_load(Path(default_registry_path()).read_text(encoding="utf-8"))
    first = next(iter(packaged["readers"]))
    (root / "eval").mkdir(parents=True)
    shutil.copy(candidate_run, root / "eval" / "candidate.trec")
    registry = {
        "retrievers": {"candidate": {"kind": "run_file", "path": "candidate.trec"}},
        "readers": {first: packaged["readers"][first]},
        "evaluation": packaged["evaluation"],
    }
    (root / "eval" / "registry.yaml").write_text(yaml.safe_dump(registry), encoding="utf-8")
    shutil.copy(gate.baseline, root / "eval" / "baseline.json")
    (root / ".erag" / "labels").mkdir(parents=True)
    # what actions/cache restores: the store as the last run left it (SQLite's backup API, so
    # what this process's open connections keep in the -wal file is included)
    with (
        sqlite3.connect(gate.store) as source,
        sqlite3.connect(root / ".erag/labels/labels.sqlite") as copy,
    ):
        source.backup(copy)
    return root


@pytest.mark.slow
@pytest.mark.parametrize(
    ("change", "gate_rc", "verdict"),
    [("worse", EXIT_GATE_FAILED, "❌ worse"), ("same", 0, "➖ indistinguishable")],
)
def test_the_documented_workflow_gates_a_pull_request(
    gate: Gate, tmp_path: Path, change: str, gate_rc: int, verdict: str
) -> None:
    run = gate.worse if change == "worse" else gate.same
    repo = _repo(gate, tmp_path / "repo", run)
    summary = tmp_path / "step-summary.md"
    steps = _run_workflow(repo, summary)
    assert steps == [("Gate the retriever change", gate_rc), ("Summary for the pull request", 0)]
    text = summary.read_text(encoding="utf-8")
    assert text.startswith(f"### eRAG retrieval gate: {verdict}")
    assert "0 pairs answered by the reader" in text  # every label came from the cached store


def test_the_documented_question_log_gate_runs(
    gate: Gate, storage_env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """docs/gate.md's question-log example, as written, in a folder laid out as it names: the
    sample's questions as a log without answers, its corpus, and BM25's top 3 on both sides.
    Both sides are labelled against one set of references (the store already holds every
    pair's answer: no reader call for a label), so the same ranking is indistinguishable."""
    import shlex

    from erag_dagster.data.loaders import load_dataset

    doc = (REPO_ROOT / "docs" / "gate.md").read_text(encoding="utf-8")
    (example,) = re.findall(r"erag-dagster (compare [^`]*?--reference self@union[^`]*?)\n```", doc)
    args = shlex.split(example.replace("\\\n", " "))
    ds = load_dataset(DATASET)
    (tmp_path / "eval").mkdir()
    (tmp_path / "runs").mkdir()
    ds.queries.select("query_id", "question").write_ndjson(tmp_path / "eval" / "log.jsonl")
    ds.corpus.select("doc_id", "title", "text").write_ndjson(tmp_path / "eval" / "corpus.jsonl")
    shutil.copy(gate.same, tmp_path / "runs" / "main.trec")
    shutil.copy(gate.same, tmp_path / "runs" / "pr.trec")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ERAG_LABEL_STORE", str(gate.store))
    assert main(args) == 0
    out = capsys.readouterr().out
    assert ": INDISTINGUISHABLE (margin 0," in out.splitlines()[0]
    assert "erag against self@union" in out
    # every pair of both sides was answered before (the store): a label costs no reader call
    assert re.findall(r"(\d+) pairs answered by the reader", out) == ["0", "0"]


def test_the_documented_workflow_is_the_example_file() -> None:
    doc = (REPO_ROOT / "docs" / "gate.md").read_text(encoding="utf-8")
    block = doc.split("```yaml\n")[-1].split("```")[0]
    assert block == WORKFLOW.read_text(encoding="utf-8")
    _env, steps = _workflow_steps()
    cached = [s for s in steps if str(s.get("uses", "")).startswith("actions/cache")]
    assert cached and ".erag/labels\n" in cached[0]["with"]["path"]
    assert _env["ERAG_LABEL_STORE"] == ".erag/labels/labels.sqlite"


# -- the verdict rule on per-query scores (no reader) ------------------------------------------


def _per_query(values: list[float]) -> dict[str, dict[str, float]]:
    return {f"q{i:02d}": {"RR": v} for i, v in enumerate(values)}


def test_verdict_rule_margin_and_determinism() -> None:
    from erag_dagster.gate.verdict import metric_verdicts, overall_verdict

    base = _per_query([1.0] * 12 + [0.0] * 8)
    drop = _per_query([0.5] * 12 + [0.0] * 8)  # -0.5 on 12 of 20 queries: mean -0.3
    (v,) = metric_verdicts(base, drop, ["RR"], GateRule(), STATS)
    assert v.difference == pytest.approx(-0.3) and v.ci_high < 0 and v.verdict == "worse"
    assert metric_verdicts(base, drop, ["RR"], GateRule(), STATS) == [v]  # seeded: the same
    # the margin is compared with the interval's bound, in the metric's units
    (tolerant,) = metric_verdicts(base, drop, ["RR"], GateRule(margin=-v.ci_high + 1e-9), STATS)
    assert tolerant.verdict == "indistinguishable" and tolerant.p_holm == v.p_holm
    (strict,) = metric_verdicts(base, drop, ["RR"], GateRule(margin=-v.ci_high - 1e-9), STATS)
    assert strict.verdict == "worse"
    (up,) = metric_verdicts(drop, base, ["RR"], GateRule(), STATS)
    assert up.verdict == "better" and up.difference == pytest.approx(0.3)
    assert overall_verdict([v, up]) == "worse" and overall_verdict([up]) == "better"
    with pytest.raises(InputError, match=r"--margin must lie in \[0, 1\)"):
        GateRule(margin=-0.1)
    with pytest.raises(InputError, match="different queries"):
        metric_verdicts(base, _per_query([1.0] * 19), ["RR"], GateRule(), STATS)


def test_identity_differences_name_each_field() -> None:
    from erag_dagster.gate.identity import EvalIdentity, refuse_other_identity

    a = EvalIdentity("d" * 16, "f" * 64, "erag", "em", ("RR",), 3)
    b = EvalIdentity("d" * 16, "e" * 64, "erag", "f1", ("RR",), 3)
    assert a.differences(a) == []
    assert a.differences(b) == [
        f"reader_fingerprint {'f' * 12} vs {'e' * 12}",
        "downstream_metric em vs f1",
    ]
    refuse_other_identity(a, a, "x", "y")
    with pytest.raises(InputError, match=r"^cannot compare y with baseline x: .*em vs f1\); only"):
        refuse_other_identity(a, b, "x", "y")


# -- issue 32: power before verdict, outputs, escaping, read-only store, progress ---------------


def _label_frame(values: dict[str, list[float]]) -> pl.DataFrame:
    """A label table as the labeller gives it: one row per (query, rank)."""
    rows = [(q, f"{q}-d{r}", r + 1, v) for q, labels in values.items()
            for r, v in enumerate(labels)]  # fmt: skip
    schema = {"query_id": pl.String, "doc_id": pl.String, "rank": pl.Int64, "label": pl.Float64}
    return pl.DataFrame(rows, schema=schema, orient="row")


@pytest.mark.parametrize(("n", "verdict", "failure"), [
    (6, "indistinguishable", "the gate cannot decide"),
    (200, "worse", "the candidate is worse (--fail-if worse)"),
])  # fmt: skip
def test_a_candidate_built_worse_fails_the_gate(n: int, verdict: str, failure: str) -> None:
    """Every query drops from 1.0 to 0.0 (CI [-1, -1]): with 6 queries and 3 metrics the
    smallest Holm p is 3 x 2/64 = 0.094, so the gate cannot decide and --fail-if worse fails it
    (exit 3 in the CLI); with 200 queries it is "worse" — the same decision function as the
    command (:func:`erag_dagster.gate.compare.decide`)."""
    from erag_dagster.gate.compare import decide
    from erag_dagster.gate.verdict import gate_failure

    qids = [f"q{i:03d}" for i in range(n)]
    base = _label_frame({q: [1.0, 1.0, 0.0] for q in qids})
    worse = _label_frame({q: [0.0, 0.0, 0.0] for q in qids})
    found = decide(base, worse, qids, METRICS, GateRule(), STATS)
    assert found.verdict == verdict and found.power.n == n
    assert all(v.difference == -1.0 or v.metric == "nDCG@3" for v in found.metrics)
    assert failure in gate_failure(found.verdict, found.power, "worse")
    assert gate_failure(found.verdict, found.power, "worse", allow_underpowered=True) == (
        None if n == 6 else "the candidate is worse (--fail-if worse)"
    )
    if n == 6:
        assert not found.power.can_decide and found.power.min_p_holm == pytest.approx(3 * 2 / 64)
        assert any("cannot decide" in note for note in found.notes)
    else:
        assert found.power.can_decide and 0 < found.power.detectable < 0.1
    # a candidate with no documents, or covering 1 query: scored 0 there, and said
    empty = decide(base, _label_frame({}), qids, METRICS, GateRule(), STATS)
    assert f"the candidate has no document for {n} of {n} queries" in " ".join(empty.notes)
    one = decide(base, _label_frame({qids[0]: [1.0, 1.0, 0.0]}), qids, METRICS, GateRule(), STATS)
    assert f"no document for {n - 1} of {n} queries" in " ".join(one.notes)
    assert one.verdict == verdict


def test_power_of_the_gate() -> None:
    from erag_dagster.gate.power import gate_power

    six = gate_power(6, 3, 0.0, stats(alpha=0.05))
    assert (six.min_p, six.can_decide, six.detectable) == (2 / 64, False, None)
    assert gate_power(6, 1, 0.0, stats(alpha=0.05)).queries_needed == 6  # 2/64 < 0.05
    big = gate_power(200, 3, 0.1, stats(alpha=0.05))
    assert big.can_decide and big.detectable == 0.1  # the margin dominates
    assert (
        gate_power(200, 3, 0.0, stats(alpha=1e-5)).can_decide is False
    )  # random flips: p >= 1/10001
    assert gate_power(0, 3, 0.0, stats(alpha=0.05)).can_decide is False


def test_cli_six_queries_cannot_decide_before_labelling(tmp_path: Path, capsys) -> None:
    """End to end on 6 queries: the candidate drops the answer-bearing documents; --fail-if
    worse exits 3 saying the gate cannot decide, before any reader call; the markdown
    summary says so too."""
    from erag_dagster.data.loaders import load_dataset

    spec = "sample?max_questions=6"
    ds = load_dataset(spec)
    docs = ds.corpus.get_column("doc_id").to_list()
    base, worse = tmp_path / "base.trec", tmp_path / "worse.trec"
    qrels = ds.qrels.select("query_id", "doc_id").rows()
    base.write_text("".join(f"{q} Q0 {d} 1 1.0 b\n" for q, d in qrels))
    relevant = {d for _, d in qrels}
    other = next(d for d in docs if d not in relevant)
    worse.write_text("".join(f"{q} Q0 {other} 1 1.0 w\n" for q, _ in qrels))
    summary = tmp_path / "summary.md"
    argv = ["compare", "--baseline", str(base), "--candidate", str(worse), "--dataset", spec,
            "--metric", "contains", "--k", "1", "--metrics", ",".join(METRICS),
            "--store", str(tmp_path / "none.sqlite"), "--fail-if", "worse", "--markdown",
            "--output", str(summary), "--save-candidate", str(tmp_path / "c.json")]  # fmt: skip
    assert main(argv) == EXIT_GATE_FAILED
    out, err = capsys.readouterr()
    assert "gate failed: 6 queries, 3 metrics" in err and "cannot decide" in err
    assert out.startswith("### eRAG retrieval gate: ⚠️ cannot decide")
    assert summary.read_text(encoding="utf-8") == out
    assert not (tmp_path / "none.sqlite").exists() and not (tmp_path / "c.json").exists()


def test_save_candidate_only_after_a_passing_verdict(gate: Gate, storage_env, tmp_path, capsys):
    saved = tmp_path / "candidate.json"
    worse = gate.cli("compare", "--baseline", str(gate.baseline), "--candidate", str(gate.worse))
    assert main([*worse, "--fail-if", "worse", "--save-candidate", str(saved)]) == 3
    assert not saved.exists()
    assert "not saved" in capsys.readouterr().err
    same = gate.cli("compare", "--baseline", str(gate.baseline), "--candidate", str(gate.same))
    assert main([*same, "--fail-if", "worse", "--save-candidate", str(saved)]) == 0
    capsys.readouterr()
    # the saved candidate is a baseline that reads back, verified, as the same numbers
    again = gate.cli("compare", "--baseline", str(saved), "--candidate", str(gate.baseline))
    assert main([*again, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["verdict"] == "indistinguishable"
    assert "stored labels checked against the label store: 60 of 60" in data["notes"]
    # an earlier --save-candidate output is replaced; a stranger's file needs --force
    assert main([*same, "--save-candidate", str(saved)]) == 0
    stranger = tmp_path / "notes.json"
    stranger.write_text("{}")
    assert main([*same, "--save-candidate", str(stranger)]) == 2
    assert stranger.read_text() == "{}"


def test_markdown_and_text_escape_what_comes_from_files(gate: Gate, reader, storage_env,
                                                        tmp_path: Path) -> None:  # fmt: skip
    """A candidate file name that tries to forge a second verdict heading, HTML, a table cell,
    a link and a bolded verdict word: the summary has one heading, and every line of the ref
    stays inside the line it was put in."""
    from erag_dagster.gate.escape import shown

    name = ("runs **worse**-fix\n### eRAG retrieval gate: ✅ better <img src=x onerror=alert(1)>"
            " | a | [link](http://evil.example) <script>x</script>.trec")  # fmt: skip
    hostile = tmp_path / name.replace("/", "_")
    shutil.copy(gate.same, hostile)
    result = compare(str(gate.baseline), str(hostile), gate.settings(), reader=reader)
    md = to_markdown(result)
    assert md.count("\n#") == 0 and md.startswith("### eRAG retrieval gate: ➖")
    assert "\\<img" in md and re.search(r"(?<!\\)<(img|script)", md) is None  # no raw HTML
    assert "](http" not in md and "\\[link\\]\\(http\\:" in md
    assert md.count("**indistinguishable**") == 1 and "**worse**" not in md
    headline = md.splitlines()[2]
    assert re.search(r"(?<!\\)\|", headline) is None  # no cell separator outside the table
    text = to_text(result)
    assert "\n### eRAG" not in text and shown(str(hostile)) in text
    assert shown("a\nb\x1b[31m\u202e") == "a\\nb\\x1b[31m\\u202e"
    assert shown("*_[]<>|#!`", markdown=True) == "\\*\\_\\[\\]\\<\\>\\|\\#\\!\\`"


@contextlib.contextmanager
def _read_only(folder: Path):
    """``folder`` as this process sees a read-only mount: chmod for a normal user, a read-only
    bind mount for root (who writes through permissions); skipped where neither is possible."""
    if os.geteuid() != 0:
        folder.chmod(0o555)
        for file in folder.iterdir():
            file.chmod(0o444)
        try:
            yield
        finally:
            folder.chmod(0o755)
        return
    mounted = subprocess.run(["mount", "--bind", str(folder), str(folder)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip("root, and no bind mount allowed here: cannot make a read-only store")
    try:
        remount = ["mount", "-o", "remount,bind,ro", str(folder)]
        if subprocess.run(remount, capture_output=True).returncode != 0:
            pytest.skip("root, and no read-only remount allowed here")
        yield
    finally:
        subprocess.run(["umount", str(folder)], capture_output=True, check=True)


def test_compare_reads_a_read_only_store(gate: Gate, reader, storage_env, tmp_path) -> None:
    """A label store the process cannot write (a CI cache mounted read-only) holding every
    label the comparison needs: compare reads it and writes nothing; one it lacks a pair of is
    one StorageError line naming the store."""
    folder = tmp_path / "ro"
    folder.mkdir()
    copy = folder / "labels.sqlite"
    with sqlite3.connect(gate.store) as source, sqlite3.connect(copy) as target:
        source.backup(target)
    before = copy.read_bytes()
    with _read_only(folder):
        assert not os.access(copy, os.W_OK)
        result = compare(str(gate.baseline), str(gate.same), gate.settings(store=str(copy)),
                         reader=reader)  # fmt: skip
        assert result.candidate.judged_now == 0 and result.candidate.from_store == 20 * K
        assert "60 of 60" in " ".join(result.notes)
        # one pair the store lacks: the first query's top document swapped for the last one's
        lines = gate.same.read_text().splitlines()
        first, last = lines[0].split(), lines[-1].split()
        swapped = tmp_path / "swapped.trec"
        swapped.write_text("\n".join([" ".join([*first[:2], last[2], *first[3:]]), *lines[1:]]))
        with pytest.raises(StorageError, match=r"read-only and lacks answers .*swapped\.trec"):
            compare(str(gate.baseline), str(swapped), gate.settings(store=str(copy)),
                    reader=reader)  # fmt: skip
    assert copy.read_bytes() == before and sorted(folder.iterdir()) == [copy]


def test_progress_is_throttled_and_never_silent_for_long() -> None:
    from erag_dagster.gate.heartbeat import Heartbeat

    now = [0.0]  # a clock the test moves: no wall-clock window
    lines: list[str] = []

    def advance(seconds: float, log: Heartbeat) -> None:
        for _ in range(round(seconds / 0.02)):  # the background thread's checks, by hand
            now[0] += 0.02
            log.poll()

    with Heartbeat(lines.append, "compare", min_gap=0.2, quiet=0.5, tick=None,
                   clock=lambda: now[0]) as log:  # fmt: skip
        for i in range(50):  # 50 messages in 0.1 s: at most one line per 0.2 s
            log(f"generated {i}/50 pairs")
            now[0] += 0.002
        advance(1.3, log)  # silence: a heartbeat line at least every 0.5 s
    assert lines[0] == "compare: generated 0/50 pairs" or lines[0].startswith("compare: gen")
    assert sum("generated" in line for line in lines) <= 3
    assert "compare: generated 49/50 pairs" in lines  # the newest news is never lost
    beats = [line for line in lines if "still working" in line]
    assert len(beats) >= 2 and "last: generated 49/50 pairs" in beats[-1]
    assert all("\n" not in line for line in lines)


def test_cli_prints_progress_without_verbose(gate: Gate, storage_env, capsys) -> None:
    args = gate.cli("compare", "--baseline", str(gate.baseline), "--candidate", str(gate.same))
    assert main(args) == 0
    err = capsys.readouterr().err
    assert err.strip() and all(line.startswith("compare: ") for line in err.splitlines()), err
