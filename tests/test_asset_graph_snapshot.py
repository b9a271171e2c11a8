"""Snapshot of the asset graph, so an accidental graph change shows up in review.

For every asset of the packaged registry's Definitions the snapshot holds its key, kind
(materialisable / observable), group, code version, pools, upstream keys with their partition
mappings, partitions definition (kind and dimension names, not the registry's hash keys),
automation condition (its label and operator tree) and asset checks (name: blocking or not);
plus the names of the jobs, schedules and sensors, and the main job's plan
(:func:`erag_dagster.orchestration.pipeline.plan`: which assets run together, in which order,
partitioned how). It lives in ``tests/snapshots/asset_graph.json``.

A deliberate graph change: regenerate the file and commit it with the change::

    ERAG_UPDATE_SNAPSHOT=1 .venv/bin/python -m pytest -q tests/test_asset_graph_snapshot.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import dagster as dg

from erag_dagster.orchestration.definitions import build_defs
from erag_dagster.orchestration.pipeline import plan

SNAPSHOT = Path(__file__).parent / "snapshots" / "asset_graph.json"


def _partitions(partitions_def: dg.PartitionsDefinition | None) -> dict[str, Any] | None:
    if partitions_def is None:
        return None
    out: dict[str, Any] = {"kind": type(partitions_def).__name__}
    if isinstance(partitions_def, dg.MultiPartitionsDefinition):
        out["dimensions"] = {
            dim.name: type(dim.partitions_def).__name__ for dim in partitions_def.partitions_defs
        }
    return out


def _condition(condition: dg.AutomationCondition | None) -> str | None:
    """``label: NAME(child, ...)``, children described the same way."""
    if condition is None:
        return None
    label = condition.get_label()
    children = ", ".join(_condition(c) or "" for c in condition.children)
    tree = condition.name + (f"({children})" if children else "")
    return f"{label}: {tree}" if label else tree


def graph_snapshot(defs: dg.Definitions) -> dict[str, Any]:
    graph = defs.resolve_asset_graph()
    checks: dict[str, dict[str, str]] = {}
    for assets_def in defs.assets or []:
        for spec in getattr(assets_def, "check_specs", []):
            kind = "blocking" if spec.blocking else "non-blocking"
            checks.setdefault(spec.asset_key.to_user_string(), {})[spec.name] = kind
    assets = {}
    for key in sorted(graph.get_all_asset_keys()):
        node = graph.get(key)
        assets[key.to_user_string()] = {
            "kind": "materializable" if node.is_materializable else "observable",
            "group": node.group_name,
            "code_version": node.code_version,
            "pools": sorted(node.pools or []),
            "deps": {
                parent.to_user_string(): repr(graph.get_partition_mapping(key, parent))
                for parent in sorted(node.parent_keys)
            },
            "partitions": _partitions(node.partitions_def),
            "automation_condition": _condition(node.automation_condition),
            "checks": checks.get(key.to_user_string(), {}),
        }
    return {
        "assets": assets,
        "jobs": sorted(j.name for j in defs.resolve_all_job_defs() if not j.name.startswith("__")),
        "schedules": sorted(s.name for s in defs.schedules or []),
        "sensors": sorted(s.name for s in defs.sensors or []),
        "main_job_plan": [
            {
                "assets": [k.to_user_string() for k in step.keys],
                "partitions": _partitions(step.partitions_def),
            }
            for step in plan(defs)
        ],
    }


def test_asset_graph_matches_snapshot() -> None:
    current = graph_snapshot(build_defs())
    text = json.dumps(current, indent=1, sort_keys=True) + "\n"
    if os.environ.get("ERAG_UPDATE_SNAPSHOT"):
        SNAPSHOT.parent.mkdir(parents=True, exist_ok=True)
        SNAPSHOT.write_text(text, encoding="utf-8")
    assert SNAPSHOT.is_file(), f"no snapshot at {SNAPSHOT}; see this module's docstring"
    stored = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
    assert current == stored, (
        "the asset graph changed; if deliberate, regenerate with ERAG_UPDATE_SNAPSHOT=1 "
        "(see tests/test_asset_graph_snapshot.py)"
    )
