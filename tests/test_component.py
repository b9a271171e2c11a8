"""The eRAG Dagster component (erag_dagster/orchestration/component.py) as a team's own
project uses it.

A fresh Dagster project is written outside the checkout the way ``create-dagster project``
lays one out (pyproject with ``[tool.dg]``, ``src/<pkg>/definitions.py`` calling
``load_from_defs_folder``, ``defs/``; written by hand: this venv has no ``create-dagster``,
and nothing new is installed). Its own asset ``my_team/qrels_run`` returns a run frame; ``dg
scaffold defs`` adds the component, whose ``defs.yaml`` names that asset as a retriever
(``kind: asset``). ``dg check defs`` loads it; then the eRAG assets are materialised on a slice
of the embedded sample and the labels are found downstream of the team's asset.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import polars as pl
import pytest
import yaml

from erag_dagster.config.registry import default_registry_path, load_registry
from erag_dagster.core.errors import InputError
from erag_dagster.orchestration.component import ERagEvaluation, build_registry
from erag_dagster.orchestration.definitions import build_defs
from erag_dagster.orchestration.definitions import defs as packaged_defs
from erag_dagster.orchestration.pipeline import plan, step_job
from tests.answer_seed import shared_answers
from tests.pipeline_fixtures import scoped_env

DG = str(Path(sys.executable).parent / "dg")
PACKAGE = "my_project"
TEAM_RUN = dg.AssetKey(["my_team", "qrels_run"])
PREFIX = ["erag"]
COMPONENT_TYPE = "erag_dagster.ERagEvaluation"

PYPROJECT = """\
[project]
name = "my_project"
version = "0.1.0"
requires-python = ">=3.11"
dependencies = ["dagster", "erag-dagster"]

[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"

[tool.dg]
directory_type = "project"

[tool.dg.project]
root_module = "my_project"
registry_modules = ["my_project.components.*"]
"""

DEFINITIONS = """\
from pathlib import Path

from dagster import definitions, load_from_defs_folder


@definitions
def defs():
    return load_from_defs_folder(path_within_project=Path(__file__).parent)
"""

TEAM_ASSET = '''\
import dagster as dg
import polars as pl

from erag_dagster.data.loaders import load_dataset


@dg.asset(key_prefix=["my_team"])
def qrels_run() -> pl.DataFrame:
    """The team's retrieval run: each question's judged passage first, then the corpus's
    first passage (when it is not the judged one)."""
    data = load_dataset("sample?spread_questions=4")
    judged = data.qrels.filter(pl.col("relevance") > 0).group_by("query_id").agg(
        pl.col("doc_id").sort().first()
    )
    other = data.corpus.get_column("doc_id")[0]
    second = judged.filter(pl.col("doc_id") != other).with_columns(doc_id=pl.lit(other))
    return pl.concat(
        [judged.with_columns(rank=pl.lit(1)), second.with_columns(rank=pl.lit(2))]
    ).select("query_id", "doc_id", "rank")
'''


def _reader() -> dict:
    """The packaged first reader's config (its answers are in the tests' answer seed)."""
    raw = yaml.safe_load(Path(default_registry_path()).read_text())
    name = next(iter(raw["readers"]))
    return {name: raw["readers"][name]}


def component_attributes() -> dict:
    return {
        "key_prefix": PREFIX,
        "retrievers": {"team_run": {"kind": "asset", "asset_key": list(TEAM_RUN.path)}},
        "readers": _reader(),
        "evaluation": {
            "dataset": "sample?spread_questions=4",
            "k": 10,
            "label_k": 2,
            "e2e_ks": [1, 2],
            "list_metrics": ["P@2", "Success@2", "RR", "nDCG@2"],
            "bootstrap_resamples": 100,
        },
    }


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(
        args, cwd=cwd, capture_output=True, text=True, timeout=300, env=env, check=False
    )


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The team's project, with the component scaffolded and configured (outside the repo)."""
    root = tmp_path_factory.mktemp("team") / "my_project"
    package = root / "src" / PACKAGE
    (package / "defs").mkdir(parents=True)
    (root / "pyproject.toml").write_text(PYPROJECT)
    (package / "__init__.py").write_text("")
    (package / "definitions.py").write_text(DEFINITIONS)
    (package / "defs" / "__init__.py").write_text("")
    (package / "defs" / "qrels_run.py").write_text(TEAM_ASSET)
    scaffold = _run(
        [DG, "scaffold", "defs", "erag_dagster.ERagEvaluation", "my_eval"],
        root,
    )
    assert scaffold.returncode == 0, scaffold.stdout + scaffold.stderr
    yaml_file = package / "defs" / "my_eval" / "defs.yaml"
    scaffolded = yaml.safe_load(yaml_file.read_text())
    assert scaffolded["type"] == COMPONENT_TYPE
    scaffolded["attributes"] = component_attributes()
    yaml_file.write_text(yaml.safe_dump(scaffolded, sort_keys=False))
    return root


def test_dg_lists_the_component(tmp_path: Path) -> None:
    listed = _run([DG, "list", "components", "--json"], tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert COMPONENT_TYPE in listed.stdout


def test_packaged_defs_yaml_is_the_packaged_graph() -> None:
    """erag_dagster/defs/defs.yaml (the packaged project as a component instance) loads the
    same graph as erag_dagster.orchestration.definitions:defs, which build_defs builds for both."""
    loaded = dg.load_from_defs_folder(project_root=Path(__file__).resolve().parents[1])

    def keys(defs: dg.Definitions) -> list[str]:
        return sorted(k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys())

    assert keys(loaded) == keys(packaged_defs)
    assert sorted(s.name for s in loaded.sensors or []) == sorted(
        s.name for s in packaged_defs.sensors or []
    )


def test_docs_list_every_attribute() -> None:
    """docs/dagster-ui.md's attribute table names exactly the component's attributes, and its
    first section is the one on adding eRAG to a project."""
    page = (Path(__file__).resolve().parents[1] / "docs" / "dagster-ui.md").read_text()
    sections = [line for line in page.splitlines() if line.startswith("## ")]
    assert sections[0] == "## Add eRAG to your Dagster project"
    table = page.split("| attribute | type | meaning |", 1)[1].split("\n\n", 1)[0]
    documented = {row.split("`")[1] for row in table.splitlines() if row.startswith("| `")}
    assert documented == set(ERagEvaluation.model_fields)


def test_key_prefix_reaches_every_key_and_name(tmp_path: Path) -> None:
    """Under key_prefix [erag] every asset key, op, job, schedule and sensor is prefixed; the
    automation sensor targets the eRAG assets only; the dataset of a prefixed asset is still
    read from its tag."""
    registry = build_registry(ERagEvaluation(**component_attributes()), tmp_path / "defs.yaml")
    team = dg.AssetSpec(TEAM_RUN)  # the team's asset, declared only: nothing runs here
    defs = dg.Definitions.merge(
        build_defs(registry=registry, key_prefix=PREFIX), dg.Definitions(assets=[team])
    )
    graph = defs.resolve_asset_graph()
    keys = graph.get_all_asset_keys()
    assert all(k.path[0] == "erag" for k in keys if k != TEAM_RUN)
    assert TEAM_RUN in graph.get(dg.AssetKey(["erag", "retrieval_run"])).parent_keys
    assert {j.name for j in defs.jobs or []} == {"erag__observe_inputs"}
    assert {s.name for s in defs.sensors or []} == {
        "erag__default_automation_condition_sensor", "erag__input_change_sensor"
    }  # fmt: skip
    assert {s.name for s in defs.schedules or []} == {"erag__reevaluation_schedule"}
    ops = {a.node_def.name for a in defs.assets or [] if isinstance(a, dg.AssetsDefinition)}
    assert "erag__retrieval_run" in ops and "retrieval_run" not in ops


def test_datasets_under_a_key_prefix(tmp_path: Path, storage: Path) -> None:
    """With a datasets section under key_prefix [erag], each dataset's assets are
    erag/<dataset>/..., tagged with their dataset, and an asset reads its own dataset's spec
    (dataset_of: the tag, not the key's first part)."""
    attrs = component_attributes()
    attrs["retrievers"] = {"bm25": {"kind": "bm25"}}
    attrs["datasets"] = {"few": "sample?max_questions=3", "spread": "sample?spread_questions=4"}
    registry = build_registry(ERagEvaluation(**attrs), tmp_path / "defs.yaml")
    defs = build_defs(registry=registry, key_prefix=PREFIX)
    for assets_def in defs.assets or []:
        if isinstance(assets_def, dg.AssetsDefinition) and assets_def.is_materializable:
            for key in assets_def.keys:
                tag = assets_def.tags_by_key.get(key, {}).get("erag/dataset")
                assert tag == (key.path[1] if len(key.path) == 3 else None), key
    tables = [dg.AssetKey(["erag", "spread", name]) for name in ("corpus", "queries", "qrels")]
    result = step_job(list(defs.assets or []), dict(defs.resources or {}), tables)
    with dg.instance_for_test() as instance:
        done = result.execute_in_process(instance=instance)
    assert done.output_for_node("erag__spread__dataset_tables", "queries").height == 4


def test_component_refuses_bad_attributes(tmp_path: Path) -> None:
    """A registry file and inline sections together, an evaluation value out of range (with
    its defs.yaml line), or an asset key that is not a Dagster key is one InputError line
    naming the defs.yaml; kind: asset in a registry file read by the command line too."""
    both = ERagEvaluation(registry="registry.yaml", **component_attributes())
    with pytest.raises(InputError, match=r"defs\.yaml: give either registry"):
        build_registry(both, tmp_path / "defs.yaml")
    attrs = component_attributes()
    attrs["evaluation"]["label_k"] = 0
    defs_yaml = tmp_path / "defs.yaml"
    defs_yaml.write_text(yaml.safe_dump({"type": COMPONENT_TYPE, "attributes": attrs}))
    line = 1 + defs_yaml.read_text().splitlines().index("    label_k: 0")
    with pytest.raises(InputError, match=rf"defs\.yaml:{line}: evaluation\.label_k is 0"):
        build_registry(ERagEvaluation(**attrs), defs_yaml)
    attrs = component_attributes()
    attrs["retrievers"]["team_run"]["asset_key"] = ["my-team", "run"]
    with pytest.raises(InputError, match=r"defs\.yaml: retriever 'team_run' has asset_key"):
        build_registry(ERagEvaluation(**attrs), tmp_path / "defs.yaml")
    registry_file = tmp_path / "registry.yaml"  # outside the component: refused, one line
    registry_file.write_text(yaml.safe_dump({k: v for k, v in component_attributes().items()
                                              if k != "key_prefix"}))  # fmt: skip
    with pytest.raises(InputError, match=r"registry\.yaml: retriever 'team_run' has kind 'asset'"):
        load_registry(registry_file)


@pytest.fixture(scope="module")
def materialised(project: Path, tmp_path_factory: pytest.TempPathFactory):
    """``dg check defs`` in the team's project, then its asset and the eRAG assets up to the
    report materialised in one instance (every partition, as the main job runs them)."""
    checked = _run([DG, "check", "defs"], project)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "All definitions loaded successfully" in checked.stdout + checked.stderr
    storage = tmp_path_factory.mktemp("team_storage")
    sys.path.insert(0, str(project / "src"))
    try:
        with scoped_env(ERAG_STORAGE=str(storage)), dg.instance_for_test() as instance:
            defs = dg.load_from_defs_folder(path_within_project=project / "src" / PACKAGE)
            selection = dg.AssetSelection.assets(
                TEAM_RUN, *[["erag", name] for name in ("corpus", "queries", "qrels")],
                *[["erag", name] for name in ("retrieval_run", "doc_labels", "erag_per_query")],
                ["erag", "erag_report"],
            )  # fmt: skip
            assets, resources = list(defs.assets or []), dict(defs.resources or {})
            with shared_answers(tmp_path_factory):
                for step in plan(defs, selection):
                    for partition in step.partition_keys():
                        result = step_job(assets, resources, step.keys).execute_in_process(
                            partition_key=partition, instance=instance, raise_on_error=False
                        )
                        assert result.success, f"{step.keys} [{partition}] failed"
            yield defs, instance
    finally:
        sys.path.remove(str(project / "src"))
        for name in [m for m in sys.modules if m == PACKAGE or m.startswith(f"{PACKAGE}.")]:
            del sys.modules[name]


@pytest.mark.slow
def test_labels_have_lineage_to_the_teams_asset(materialised) -> None:
    """doc_labels of the team's retriever exist, cover its run's top-2 documents, and the
    team's asset is among the labels' upstream assets (through retrieval_run)."""
    defs, instance = materialised
    graph = defs.resolve_asset_graph()
    labels_key = dg.AssetKey(["erag", "doc_labels"])
    upstream = dg.AssetSelection.assets(labels_key).upstream().resolve(graph)
    assert TEAM_RUN in upstream
    run_key = dg.AssetKey(["erag", "retrieval_run"])
    assert TEAM_RUN in graph.get(run_key).parent_keys
    records = instance.fetch_materializations(labels_key, limit=10).records
    assert len(records) == 1  # one reader x one retriever
    meta = records[0].asset_materialization.metadata
    assert meta["retriever"].value.startswith("team_run-")
    judged = meta["pairs_judged_now"].value + meta["pairs_from_store"].value
    run_meta = instance.fetch_materializations(run_key, limit=1).records[0]
    run_meta = run_meta.asset_materialization.metadata
    assert run_meta["queries"].value == 4
    assert judged == run_meta["rows"].value  # label_k 2 = the run's depth
    report = instance.fetch_materializations(dg.AssetKey(["erag", "erag_report"]), limit=1)
    assert report.records, "erag_report was not materialised"


def test_team_run_is_validated_like_a_run_file(tmp_path: Path) -> None:
    """An asset's run is read from a polars or pandas frame (rank only: rank 1 first; score:
    ranked by it) or a run file's path, to the same run; a document id that is not in the
    dataset is one InputError naming the asset and the row; another value type is refused."""
    from erag_dagster.data.loaders import load_dataset
    from erag_dagster.retrieval.run_file import load_run_value
    from erag_dagster.retrieval.runs import write_trec_run

    data = load_dataset("sample?spread_questions=4")
    source = "asset my_team/qrels_run"
    query = data.queries["query_id"][0]
    docs = data.corpus["doc_id"][:3].to_list()
    by_rank = pl.DataFrame({"query_id": [query] * 3, "doc_id": docs, "rank": [1, 2, 3]})
    loaded = load_run_value(by_rank, source, data.queries, data.corpus, 2)
    assert loaded.run["doc_id"].to_list() == docs[:2]  # cut to k = 2
    assert loaded.queries_missing == data.queries.height - 1
    by_score = by_rank.with_columns(score=pl.Series([0.1, 0.3, 0.2])).to_pandas()
    ranked = load_run_value(by_score, source, data.queries, data.corpus, 3).run
    assert ranked["doc_id"].to_list() == [docs[1], docs[2], docs[0]]
    trec = tmp_path / "team.trec"
    write_trec_run(ranked, trec)
    from_file = load_run_value(str(trec), source, data.queries, data.corpus, 3).run
    assert from_file["doc_id"].to_list() == ranked["doc_id"].to_list()
    bad = pl.DataFrame({"query_id": [query], "doc_id": ["nope"], "rank": [1]})
    with pytest.raises(InputError, match=r"asset my_team/qrels_run \(row 1\): doc_id 'nope'"):
        load_run_value(bad, source, data.queries, data.corpus, 10)
    with pytest.raises(InputError, match=r"its value is a dict; a retriever of kind asset"):
        load_run_value({"run": 1}, source, data.queries, data.corpus, 10)
