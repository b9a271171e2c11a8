"""Code in the identity: versions of the downstream metrics, the prompt builder and the label
methods are part of the store keys and of the assets' ``code_version`` (erag_dagster/
code_versions.py); labels made outside Dagster record an evaluation id that ``audit`` shows.

The acceptance case materialises a real graph (one reader, the bm25 retriever, 4 questions: the
labels, the end-to-end scores, the eRAG reports and what they read; answers seeded from the
session's store), raises the ``f1``
metric's version in this process, and checks with Dagster's public API (the asset specs' code
versions, the ``dagster/code_version`` tag of each asset's latest materialisation,
``evaluate_automation_conditions``) that exactly the assets that run ``f1`` are stale and
requested, and that running them computes exactly the ``f1`` scores again, from the stored
answers: the reader generates nothing.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import dagster as dg
import polars as pl
import pytest
import yaml

import erag_dagster
from erag_dagster.cli import main
from erag_dagster.core.code_versions import CodeVersion, asset_code_version, key_parts
from erag_dagster.core.hashing import sha256_json
from erag_dagster.gate.compare import GateSettings, make_baseline
from erag_dagster.labels.keys import score_key
from erag_dagster.labels.store import open_store
from erag_dagster.labels.tables import SCORES
from erag_dagster.metrics import downstream
from erag_dagster.orchestration.definitions import build_defs
from erag_dagster.orchestration.pipeline import plan
from erag_dagster.orchestration.resources import EvalSettings
from erag_dagster.readers import prompts
from erag_dagster.readers.presets import PRESETS
from tests.answer_seed import FIXTURE_ANSWERS, shared_answers
from tests.pipeline_fixtures import scoped_env, small_registry, write_instance_yaml

# -- the rules, without Dagster ------------------------------------------------------------------


def test_version_one_adds_nothing_and_later_versions_are_named() -> None:
    first, second = CodeVersion("f1"), CodeVersion("f1", "2")
    assert (first.tag, first.task) == ("f1", "f1/v1")
    assert (second.tag, second.task) == ("f1/v2", "f1/v2")
    assert key_parts([first, CodeVersion("prompt_builder", "3"), second]) == [
        "prompt_builder/v3",
        "f1/v2",
    ]
    assert asset_code_version([first, CodeVersion("postprocess")]) == "1"
    assert asset_code_version([CodeVersion("zz", "2"), second, second]) == "1+f1/v2+zz/v2"
    for bad in (("", "1"), ("a/b", "1"), ("a+b", "1"), ("f1", "v2"), ("f1", ""), ("f1", 2)):
        with pytest.raises(ValueError):
            CodeVersion(*bad)


def test_a_score_key_holds_the_metric_version_from_version_two_on() -> None:
    measure = downstream.get_downstream_metric("f1")
    assert measure.version == "1" and measure("The Broncos", ["broncos"]) == 1.0
    # version 1: the key every store written before versions existed holds
    assert (
        score_key("g", "h", measure) == sha256_json(["g", "h", "f1"]) == score_key("g", "h", "f1")
    )
    raised = dataclasses.replace(measure, version="2")
    assert score_key("g", "h", raised) == sha256_json(["g", "h", "f1/v2"])
    assert score_key("g", "h", raised) != score_key("g", "h", measure)


def test_the_prompt_builder_version_enters_the_reader_identity_from_version_two_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from erag_dagster.readers.spec import ReaderSpec

    spec = ReaderSpec.from_dict({"model": "packaged:smollm2-135m-instruct"}, name="r")
    before = prompts.prompt_identity(spec, spec.answer_prefix)
    assert "builder_version" not in before  # version 1: the seeded answers' keys hold
    monkeypatch.setattr(prompts, "PROMPT_BUILDER", CodeVersion("prompt_builder", "2"))
    after = prompts.prompt_identity(spec, spec.answer_prefix)
    assert after == {**before, "builder_version": "2"}
    assert sha256_json(after) != sha256_json(before)


def _code_versions(registry: Path, settings: EvalSettings | None = None) -> dict[str, str]:
    defs = build_defs(str(registry), settings)
    return {s.key.to_user_string(): s.code_version for s in defs.resolve_all_asset_specs()}


def test_asset_code_versions_follow_exactly_the_code_they_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = small_registry(tmp_path / "reg")
    base = _code_versions(registry)
    # the answer extraction and the prompt presets are at version 2 (issue 43): every asset
    # holding reader answers carries them, every other is at "1" (what was declared before)
    now = "+" + "+".join(sorted(key_parts([prompts.POSTPROCESS, PRESETS])))
    readers = {"doc_labels", "end_to_end", "baseline_labels"}
    assert {k: v for k, v in base.items() if v not in ("1", None)} == dict.fromkeys(
        readers, "1" + now
    )

    def raised(name: str) -> dict[str, str]:
        changed = dataclasses.replace(downstream.DOWNSTREAM_METRICS[name], version="2")
        with monkeypatch.context() as patch:
            patch.setitem(downstream.DOWNSTREAM_METRICS, name, changed)
            now = _code_versions(registry)
        return {key: version for key, version in now.items() if version != base[key]}

    # the registry's metric is f1: the labels and the end-to-end scores run it
    # (and the closed-book row of Table 1, in baseline_labels)
    assert raised("f1") == dict.fromkeys(readers, "1+f1/v2" + now)
    assert raised("em") == {}  # a metric nothing runs changes nothing
    assert raised("contains") == {"baseline_labels": "1+contains/v2" + now}  # containment
    # the metric in force is the settings' (``erag-dagster run --metric em``)
    with monkeypatch.context() as patch:
        em = dataclasses.replace(downstream.DOWNSTREAM_METRICS["em"], version="3")
        patch.setitem(downstream.DOWNSTREAM_METRICS, "em", em)
        by_em = _code_versions(registry, EvalSettings(registry_path=str(registry), metric="em"))
    assert by_em["doc_labels"] == by_em["end_to_end"] == "1+em/v3" + now
    # signed labels run the metric too (baseline_labels), and the prompt builder is everywhere
    signed = small_registry(tmp_path / "signed", **{"evaluation.label_methods": ["signed"]})
    with monkeypatch.context() as patch:
        patch.setitem(
            downstream.DOWNSTREAM_METRICS,
            "f1",
            dataclasses.replace(downstream.DOWNSTREAM_METRICS["f1"], version="2"),
        )
        patch.setattr(prompts, "PROMPT_BUILDER", CodeVersion("prompt_builder", "2"))
        both = _code_versions(signed)
    expected = "1+f1/v2+postprocess/v2+prompt_builder/v2+prompt_presets/v2"
    assert both["baseline_labels"] == both["doc_labels"] == both["end_to_end"] == expected
    assert {k for k, v in both.items() if v not in ("1", None)} == {
        "doc_labels",
        "end_to_end",
        "baseline_labels",
    }


# -- the acceptance case: a metric's version raised on a materialised graph ---------------------


#: What the acceptance case materialises: the labels, the end-to-end scores and the eRAG
#: reports, with everything they read (the other reports are not needed to show the rule).
SUBGRAPH = (
    dg.AssetSelection.assets("erag_report", "end_to_end")
    .upstream()
    .required_multi_asset_neighbors()
)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, shared_data: Path):
    """One reader x bm25 over 4 questions: :data:`SUBGRAPH` materialised, one run per
    partition, after an observation of the inputs (as ``erag-dagster run`` does)."""
    root = tmp_path_factory.mktemp("code_versions")
    home = write_instance_yaml(root / "dagster_home")
    path = small_registry(root / "reg", dataset="sample?max_questions=4")
    raw = yaml.safe_load(path.read_text())
    raw["retrievers"] = {"bm25": raw["retrievers"]["bm25"]}
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    env = {"ERAG_STORAGE": str(root / "storage"), "DAGSTER_HOME": str(home)}
    with scoped_env(**env):
        instance = dg.DagsterInstance.from_config(str(home))
        defs = build_defs(str(path))
        observe = defs.resolve_job_def("observe_inputs")
        assert observe.execute_in_process(instance=instance).success
        with shared_answers(tmp_path_factory):
            for step in plan(defs, SUBGRAPH):
                for partition_key in step.partition_keys():
                    done = dg.materialize(
                        list(defs.assets), selection=list(step.keys),
                        partition_key=partition_key, resources=dict(defs.resources),
                        instance=instance,
                    )  # fmt: skip
                    assert done.success
        yield {"registry": path, "instance": instance, "env": env, "root": root}
    instance.dispose()


def materialized(defs: dg.Definitions, instance: dg.DagsterInstance) -> set[str]:
    """The assets of ``defs`` that have a materialisation in ``instance``."""
    return {
        spec.key.to_user_string()
        for spec in defs.resolve_all_asset_specs()
        if instance.get_latest_materialization_event(spec.key) is not None
    }


def stale_by_code(defs: dg.Definitions, instance: dg.DagsterInstance) -> set[str]:
    """Assets whose code version differs from the one their latest materialisation recorded
    (Dagster's ``dagster/code_version`` tag): what Dagster shows as stale for code."""
    stale = set()
    for spec in defs.resolve_all_asset_specs():
        event = instance.get_latest_materialization_event(spec.key)
        if event is None or event.asset_materialization is None:
            continue
        recorded = event.asset_materialization.tags.get("dagster/code_version")
        if recorded != spec.code_version:
            stale.add(spec.key.to_user_string())
    return stale


def requested(result) -> dict[str, set[str]]:
    """Asset → the partitions (or ``{"None"}``) an automation tick requested."""
    out: dict[str, set[str]] = {}
    for spec_key in result._requested_partitions_by_asset_key:
        parts = {str(p) for p in result.get_requested_partitions(spec_key)}
        if parts:
            out[spec_key.to_user_string()] = parts
    return out


def _scores(store_path: Path) -> pl.DataFrame:
    with open_store(store_path, read_only=True) as store:
        rows = [row for chunk in store.iter_rows(SCORES) for row in chunk]
    return pl.DataFrame(rows, schema=SCORES.schema, orient="row")


@pytest.mark.slow
def test_raising_a_metric_version_recomputes_exactly_its_scores_and_assets(
    world, monkeypatch: pytest.MonkeyPatch
) -> None:
    instance, registry = world["instance"], world["registry"]
    for name, value in world["env"].items():
        monkeypatch.setenv(name, value)
    store_path = world["root"] / "storage" / "labels.sqlite"
    base = build_defs(str(registry))
    assert stale_by_code(base, instance) == set()
    made = materialized(base, instance)
    assert {"doc_labels", "end_to_end", "erag_per_query", "erag_report"} <= made
    tick = dg.evaluate_automation_conditions(defs=base, instance=instance)
    assert not made & set(requested(tick))  # materialised and unchanged: nothing to redo
    with open_store(store_path, read_only=True) as store:
        generations = store.count_generations()
    before = _scores(store_path)
    assert "f1" in set(before["metric"]) and "f1/v2" not in set(before["metric"])

    raised = dataclasses.replace(downstream.DOWNSTREAM_METRICS["f1"], version="2")
    monkeypatch.setitem(downstream.DOWNSTREAM_METRICS, "f1", raised)
    bumped = build_defs(str(registry))
    # exactly the assets that run f1 are stale, and automation requests exactly those
    assert stale_by_code(bumped, instance) == {"doc_labels", "end_to_end"}
    result = dg.evaluate_automation_conditions(defs=bumped, instance=instance, cursor=tick.cursor)
    todo = {key: parts for key, parts in requested(result).items() if key in made}
    assert set(todo) == {"doc_labels", "end_to_end"}  # (an asset never made is always asked)
    for key, partitions in sorted(todo.items()):  # what the automation sensor would launch
        for partition in sorted(partitions):
            done = dg.materialize(
                list(bumped.assets), selection=[key], partition_key=partition,
                resources=dict(bumped.resources), instance=instance,
            )  # fmt: skip
            assert done.success

    # the reader generated nothing: no new answer, and the labels say every pair was stored
    with open_store(store_path, read_only=True) as store:
        assert store.count_generations() == generations
    event = instance.get_latest_materialization_event(dg.AssetKey("doc_labels"))
    metadata = event.asset_materialization.metadata
    assert metadata["pairs_judged_now"].value == 0
    assert (  # the versions above 1 of what the labels depend on
        event.asset_materialization.tags["dagster/code_version"]
        == "1+f1/v2+postprocess/v2+prompt_presets/v2"
    )
    # exactly the f1 scores were computed again, once each, under their own keys; every
    # stored score is kept as it was
    after = _scores(store_path)
    old = after.filter(pl.col("metric") == "f1")
    new = after.filter(pl.col("metric") == "f1/v2")
    assert after.height == before.height + new.height
    assert (
        after.filter(pl.col("metric") != "f1/v2").sort("score_key").equals(before.sort("score_key"))
    )
    assert new.height == metadata["pairs_from_store"].value  # one score per distinct pair
    same = new.join(old, on=["generation_key", "gold_hash"], suffix="_v1")
    assert same.height == new.height  # each re-scores a stored answer scored before
    assert same["score"].to_list() == same["score_v1"].to_list()  # same formula, same values
    assert stale_by_code(bumped, instance) == set()
    # the labels did not change, so nothing downstream of them has anything to do
    last = dg.evaluate_automation_conditions(defs=bumped, instance=instance, cursor=result.cursor)
    assert not made & set(requested(last))


# -- who made a label outside Dagster -------------------------------------------------------------


@pytest.mark.slow
def test_audit_shows_the_evaluation_id_of_labels_made_by_evaluate_and_the_gate(
    storage: Path, capsys: pytest.CaptureFixture
) -> None:
    store = storage / "api-labels.sqlite"
    with open_store(store) as seeded:  # the answers only: every score is this call's own
        seeded.import_recovery(FIXTURE_ANSWERS)
    report = erag_dagster.evaluate(
        dataset="sample?spread_questions=6", retrievers=["bm25"],
        reader="gemma3-270m", metrics=["nDCG@2"], k=10, label_k=2, store=store,
    )  # fmt: skip
    bm25 = report["doc_labels"].filter(pl.col("retriever").str.starts_with("bm25"))
    row = bm25.row(0, named=True)
    argv = ["audit", "--query", row["query_id"], "--doc", row["doc_id"], "--store", str(store)]
    assert main([*argv, "--json"]) == 0
    records = [r for r in json.loads(capsys.readouterr().out) if r["metric"] == "f1"]
    assert len(records) == 1, records
    made = records[0]["score_run_id"]
    assert re.fullmatch(r"api:[0-9a-f]{32}", made), made
    # one id for the whole call: every score it stored records the same one
    ids = set(_scores(store)["producer_run_id"])
    assert ids == {made}
    assert main(argv) == 0  # the text form shows it too
    assert f"score_run_id: {made}" in capsys.readouterr().out

    # the gate's labels record their own id: a baseline of the same pairs scored with em (the
    # answers are read from the store; the em scores are new rows, made by this baseline)
    settings = GateSettings(
        dataset="sample?spread_questions=6", reader="gemma3-270m", metric="em",
        list_metrics=["nDCG@2"], label_k=2, store=str(store),
    )  # fmt: skip
    gated = make_baseline("bm25", storage / "baseline.json", settings)
    assert gated.judged_now == 0  # every answer from the store
    assert main([*argv, "--json"]) == 0
    by_metric = {r["metric"]: r for r in json.loads(capsys.readouterr().out)}
    assert by_metric["f1"]["score_run_id"] == made  # the first writer's row is kept
    assert re.fullmatch(r"gate:[0-9a-f]{32}", by_metric["em"]["score_run_id"])
