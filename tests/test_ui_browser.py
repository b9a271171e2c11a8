"""The Dagster UI in a real headless browser (Debian's chromium driven by Playwright).

Starts ``dagster dev`` on 127.0.0.1, opens the asset graph, launches one ``doc_labels``
partition from the asset page, waits for the run to succeed, and reads the reader fingerprint
from the partition's metadata on the page. Screenshots go to ``test-artifacts/``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import dagster as dg
import pytest

from erag_dagster.config.registry import load_registry
from erag_dagster.orchestration.pipeline import materialize_all
from erag_dagster.orchestration.resources import EvalSettings
from tests.pipeline_fixtures import scoped_env, small_registry, write_instance_yaml

REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = REPO / "test-artifacts"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
BROWSER_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
]  # fmt: skip

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_for(url: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"{url} did not answer within {timeout} s")


def _graphql(base: str, query: str, variables: dict | None = None) -> dict:
    body = json.dumps({"query": query, "variables": variables or {}}).encode()
    request = urllib.request.Request(
        f"{base}/graphql", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


DEV_ARGS = ("-m", "erag_dagster.orchestration.definitions", "-h", "127.0.0.1")


@pytest.fixture(scope="module")
def dagster_ui(tmp_path_factory: pytest.TempPathFactory):
    if not Path(CHROMIUM).exists():
        pytest.fail("Debian's chromium is not installed (.ci/run installs it)")
    root = tmp_path_factory.mktemp("ui")
    home = write_instance_yaml(root / "dagster_home")
    registry_path = small_registry(root / "registry", dataset="sample?max_questions=3")
    env = dict(os.environ)
    env.update(
        DAGSTER_HOME=str(home),
        ERAG_STORAGE=str(root / "storage"),
        ERAG_REGISTRY=str(registry_path),
        ERAG_TORCH_THREADS="1",
        ERAG_STEP_EXECUTOR="in_process",
        HF_HUB_OFFLINE="1",
    )
    # upstream of the partition we launch from the UI, materialised in the same instance
    with scoped_env(**{k: env[k] for k in ("DAGSTER_HOME", "ERAG_STORAGE", "ERAG_REGISTRY")}):
        instance = dg.DagsterInstance.from_config(str(home))
        materialize_all(
            EvalSettings(registry_path=str(registry_path)),
            instance=instance,
            stages=["none"],
            log=lambda m: None,
        )
    port = _free_port()
    log = (root / "dagster-dev.log").open("w")
    # what `make dev` runs: a bare `dagster dev` started by an xdist worker inherits SIGINT
    # ignored and hangs on the stop below until SIGKILL (erag_dagster/orchestration/dev_server.py)
    proc = subprocess.Popen(
        [sys.executable, "-m", "erag_dagster.orchestration.dev_server", *DEV_ARGS, "-p", str(port)],
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        process_group=0,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_for(f"{base}/server_info", timeout=120)
        yield {"base": base, "registry": load_registry(registry_path), "root": root}
    finally:
        # `dagster dev` maps SIGTERM to SIGINT handling; stop the whole group with SIGINT
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.killpg(proc.pid, 0)
                time.sleep(0.2)
            except ProcessLookupError:
                break
        log.close()


def test_launch_partition_from_the_ui_and_read_fingerprint(dagster_ui) -> None:
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import expect, sync_playwright

    base = dagster_ui["base"]
    registry = dagster_ui["registry"]
    partition = f"{registry.reader_partitions[0]}|{registry.retriever_partitions[0]}"
    ARTIFACTS.mkdir(exist_ok=True)
    expect.set_options(timeout=60_000)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=BROWSER_ARGS)
        page = browser.new_page(viewport={"width": 1500, "height": 1000})
        page.set_default_timeout(60_000)
        # the asset graph
        page.goto(f"{base}/asset-groups")
        expect(page.get_by_text("Global asset lineage").first).to_be_visible()
        expect(page.get_by_text("meta_evaluation").first).to_be_visible()
        page.screenshot(path=str(ARTIFACTS / "ui-asset-graph.png"))
        # the asset page: Materialize… → pick one partition → launch
        page.goto(f"{base}/assets/doc_labels")
        page.get_by_role("button", name="Materialize…").first.click()
        confirm = page.get_by_role("button", name="Confirm")
        try:  # "upstream not materialised" warning, shown for some partition sets
            confirm.wait_for(timeout=3_000)
            confirm.click()
        except PlaywrightTimeout:
            pass
        dialog = page.get_by_role("dialog").first
        expect(dialog.get_by_text("Partition selection")).to_be_visible()
        # one partition picker per dimension: reader, then retriever
        reader_key, retriever_key = partition.split("|")
        for index, value in enumerate((reader_key, retriever_key)):
            picker = dialog.locator('[aria-haspopup="dialog"]').nth(index)
            for _ in range(5):  # the first click is sometimes ignored
                picker.click()
                if picker.get_attribute("aria-expanded") == "true":
                    break
                time.sleep(0.5)
            page.locator(f'[data-tooltip="{value}"]').first.click()
            page.keyboard.press("Escape")
        expect(dialog.get_by_text("1 partition", exact=True)).to_be_visible()
        page.get_by_role("button", name="Launch 1 run").click()
        expect(page.get_by_text("Launched run").first).to_be_visible()
        page.screenshot(path=str(ARTIFACTS / "ui-launched.png"))
        # wait for the run to succeed (GraphQL status; the page is checked afterwards)
        deadline = time.monotonic() + 600
        status = None
        while time.monotonic() < deadline:
            runs = _graphql(
                base,
                "{ runsOrError(limit: 5) { ... on Runs { results { runId status tags "
                "{ key value } } } } }",
            )["data"]["runsOrError"]["results"]
            mine = [
                r for r in runs
                if {"key": "dagster/partition", "value": partition} in r["tags"]
            ]  # fmt: skip
            status = mine[0]["status"] if mine else None
            if status in ("SUCCESS", "FAILURE", "CANCELED"):
                break
            time.sleep(2)
        assert status == "SUCCESS", f"run for {partition} ended as {status}"
        page.goto(f"{base}/runs")
        expect(page.get_by_text("Success").first).to_be_visible()
        # the partition's metadata shows the reader fingerprint
        from urllib.parse import quote

        page.goto(f"{base}/assets/doc_labels?view=partitions&partition={quote(partition)}")
        row = page.locator("tr", has_text="reader_fingerprint").first
        expect(row).to_be_visible()
        fingerprint = row.inner_text().split()[-1]
        page.screenshot(path=str(ARTIFACTS / "ui-partition-metadata.png"), full_page=True)
        browser.close()
    assert len(fingerprint) == 64 and all(c in "0123456789abcdef" for c in fingerprint)
