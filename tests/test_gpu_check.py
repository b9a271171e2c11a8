"""bench/gpu_check.py, the reader on a GPU, run here on the CPU so that it cannot rot.

* The dry run: the script in a subprocess on a few pairs (``--device cpu``) with ``import
  dagster``, ``polars``, ``pyserini`` and ``faiss`` made to fail (what the GPU image lacks): it
  prints its one table, and the float32 answers are equal across the batch sizes and orders it
  tried.
* Its standard-library reading of the sample is the project loader's, and its BM25 lists
  (``bench/gpu_check_bm25.trec``) are what the project's BM25 retrieves today.
* The weights pack (slow): chunked, carried in part (one line names the missing chunk),
  reassembled, dequantised and compared tensor by tensor with the converted folder here.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from erag_dagster.core.errors import InputError

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import gpu_check  # noqa: E402
import gpu_pack  # noqa: E402

#: Run as ``python -c BLOCKER script args...``: the four packages raise ModuleNotFoundError on
#: import (as where they are not installed), and the ones loaded are listed on stderr at exit.
BLOCKER = """
import importlib.abc, runpy, sys
BLOCKED = {"dagster", "polars", "pyserini", "faiss"}
class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"blocked: {name}", name=name)
sys.meta_path.insert(0, Blocker())
sys.argv = sys.argv[1:]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
finally:
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
    print("blocked modules loaded:", loaded, file=sys.stderr)
"""
#: Two pairs (one question, its first two documents), two new tokens: bfloat16 on a CPU without
#: bf16 instructions is emulated, ~5x slower than float32 (4 pairs x 4 tokens took 170 s).
PAIRS = 2
DRY_RUN = [
    "--device", "cpu", "--readers", "smollm2-135m", "--pairs", str(PAIRS), "--per-query", "2",
    "--batch-sizes", "1,4", "--ks", "1,2", "--table2-queries", "1", "--rounds", "1",
    "--max-new-tokens", "2",
]  # fmt: skip


def _script(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    command = [sys.executable, "-c", BLOCKER, str(ROOT / "bench" / "gpu_check.py"), *args]
    return subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env)


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp_path_factory.mktemp("gpu_check") / "cpu.json"
    done = _script(*DRY_RUN, "--json", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    return done, json.loads(out.read_text(encoding="utf-8"))


def test_dry_run_prints_its_table_without_the_blocked_packages(dry_run) -> None:
    done, result = dry_run
    assert "blocked modules loaded: []" in done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("bench/gpu_check.py on CPU (cpu;")
    assert lines[1].split() == ["section", "reader", "dtype", "what", "value", "compare"]
    body = [line.split()[0:2] for line in lines[3:]]
    # per dtype: 2 throughput rows + 1 determinism row; Table 2: 3 modes x 2 ks + the paper
    assert body.count(["throughput", "smollm2-135m"]) == 4
    assert body.count(["determinism", "smollm2-135m"]) == 2
    assert body.count(["table2", "smollm2-135m"]) == 6
    assert body[-1] == ["table2", "paper"]
    assert f"pairs/s, batch 1 ({PAIRS} pairs)" in done.stdout
    assert "answers equal, batch 1/4 x 2 orders" in done.stdout
    assert [row["section"] for row in result["tables"]["rows"]].count("table2") == 7


def test_dry_run_float32_answers_equal_in_every_layout(dry_run) -> None:
    _, result = dry_run
    runs = {run["dtype"]: run for run in result["runs"]}
    assert sorted(runs) == ["bfloat16", "float32"]
    fp32 = runs["float32"]
    layouts = [(lay["batch_size"], lay["order"]) for lay in fp32["layouts"]]
    assert layouts == [(1, "forward"), (1, "reversed"), (4, "forward"), (4, "reversed")]
    assert fp32["equal_in_every_layout"] == fp32["pairs"] == PAIRS
    first = fp32["layouts"][0]["answers"]
    assert all(lay["answers"] == first for lay in fp32["layouts"])
    assert all(lay["guarded"] for lay in fp32["layouts"])
    assert not any(lay["guarded"] for lay in runs["bfloat16"]["layouts"])
    assert 0 <= runs["bfloat16"]["equal_in_every_layout"] <= PAIRS
    assert len(fp32["labels_f1"]) == PAIRS and all(0.0 <= x <= 1.0 for x in fp32["labels_f1"])
    cells = [(row["k"], row["mode"]) for row in result["table2"]]
    assert cells == [(k, m) for k in (1, 2) for m in gpu_check.MODES]
    assert all(row["seconds"] > 0 and row["peak_mib"] is None for row in result["table2"])
    assert result["pairs"] == [[q.query_id, d] for q, d in gpu_check.fixed_pairs(PAIRS, 2)]


def test_compare_file_adds_the_other_machines_figures(dry_run, tmp_path: Path) -> None:
    """A second machine's run against the first (here: the dry run against itself)."""
    _, result = dry_run
    path = tmp_path / "cpu.json"
    path.write_text(json.dumps(result), encoding="utf-8")
    compare = gpu_check.load_compare(path, gpu_check.fixed_pairs(PAIRS, 2))
    rows = gpu_check.table_rows(result, compare)
    det = [r for r in rows if r["section"] == "determinism" and r["dtype"] == "float32"]
    assert det[0]["compare"] == f"{PAIRS}/{PAIRS} equal to [cpu]"
    assert all(r["compare"].endswith("[cpu]") for r in rows if r["section"] == "throughput")
    with pytest.raises(InputError, match="its pairs differ"):
        gpu_check.load_compare(path, gpu_check.fixed_pairs(3, 3))


def test_bad_input_is_one_line(tmp_path: Path) -> None:
    done = _script("--readers", "nope", "--device", "cpu")
    assert done.returncode == 2
    assert done.stderr.splitlines()[0].startswith("gpu_check: ")
    assert "no reader 'nope'" in done.stderr and "Traceback" not in done.stderr
    done = _script("--pack-dir", str(tmp_path), "--readers", "smollm2-135m", "--status")
    assert done.returncode == 2 and "no pack manifest" in done.stderr
    done = _script("--readers", "smollm2-135m", "--device", "cpu", "--batch-sizes", "4,16")
    assert done.returncode == 2 and "--batch-sizes must include 1" in done.stderr


def test_sample_read_with_the_standard_library_is_the_project_loaders() -> None:
    from erag_dagster.data.loaders import load_dataset
    from erag_dagster.readers.passages import reader_passages

    ds = load_dataset("sample")
    passages, queries = gpu_check.load_sample()
    assert passages == dict(zip(ds.corpus["doc_id"], reader_passages(ds.corpus), strict=True))
    expected = {
        qid: (question, list(answers))
        for qid, question, answers in ds.queries.select("query_id", "question", "answers").rows()
    }
    assert queries == expected


def test_bm25_lists_are_the_projects_bm25_today(tmp_path: Path) -> None:
    path = tmp_path / "run.trec"
    gpu_check.write_run(path)
    assert path.read_text(encoding="utf-8") == gpu_check.RUN_PATH.read_text(encoding="utf-8")


@pytest.mark.slow
def test_pack_chunks_reassemble_to_the_same_weights(tmp_path: Path) -> None:
    pack = tmp_path / "pack"
    done = _script("--pack", str(pack), "--readers", "smollm2-135m", "--chunk-mib", "40")
    assert done.returncode == 0, done.stderr[-2000:]
    manifest = json.loads((pack / "manifest.json").read_text(encoding="utf-8"))
    chunks = manifest["readers"]["smollm2-135m"]["chunks"]
    assert len(chunks) == 3 and all(c["bytes"] <= 40 << 20 for c in chunks)
    assert "3. carry `" in done.stdout and (pack / "site" / "gguf").is_dir()
    # One call's worth carried: the check names the missing chunks in one line.
    part = tmp_path / "part"
    (part / "chunks").mkdir(parents=True)
    shutil.copy(pack / "manifest.json", part / "manifest.json")
    shutil.copy(pack / chunks[0]["file"], part / chunks[0]["file"])
    done = _script("--pack-dir", str(part), "--readers", "smollm2-135m", "--status")
    assert done.returncode == 0 and "1/3 chunks, missing chunks/smollm2-135m.01" in done.stdout
    done = _script("--pack-dir", str(part), "--readers", "smollm2-135m", "--device", "cpu")
    assert done.returncode == 2 and "is incomplete: chunks/smollm2-135m.01 (missing)" in done.stderr
    # All carried: reassembled, dequantised, the same float32 tensors, the same answer.
    folder, checks = gpu_pack.unpack_reader(pack, "smollm2-135m", manifest)
    counts = checks["tensors"]
    assert checks["gguf_sha256_ok"] and counts["equal"] == counts["tensors"] > 0
    assert counts["differ"] == counts["unmatched"] == 0
    config = gpu_check.registry_readers(["smollm2-135m"])["smollm2-135m"]
    passages, _ = gpu_check.load_sample()
    query, doc = gpu_check.fixed_pairs(1, 1)[0]
    item = [(query.question, passages[doc])]
    packed = gpu_check.make_reader("smollm2-135m", config, model=str(folder), device="cpu")
    original = gpu_check.make_reader("smollm2-135m", config, device="cpu")
    assert packed.answer(item) == original.answer(item)
