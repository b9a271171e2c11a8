"""``backend: openai`` against a real OpenAI-compatible server (``transformers serve``, loopback).

The server (tests/openai_server.py) serves the packaged SmolLM2 reader; the labels the project
stores must be the server's own answers to the same requests, made here with the ``openai``
package directly. Also: a server stopped and restarted mid-run (no lost pair, no duplicate),
HTTP 429 with Retry-After through a loopback proxy, one-line errors for an unreachable server
and an unknown model, the API key absent from every stored byte, and the P("yes") skip line.
"""

from __future__ import annotations

import importlib.util
import sqlite3
import threading
import time
from pathlib import Path

import dagster as dg
import openai
import polars as pl
import pytest
import yaml

from erag_dagster.cli import main
from erag_dagster.config.registry import default_registry_path
from erag_dagster.core.errors import InputError
from erag_dagster.labels.cached import CommitPolicy
from erag_dagster.labels.labeller import label_run
from erag_dagster.labels.store import LabelStore
from erag_dagster.readers.extraction import extract_answer
from erag_dagster.readers.factory import reader_from_config
from erag_dagster.readers.openai_reader import LogprobsUnavailable, OpenAIReader
from erag_dagster.readers.prompts import build_messages, reader_passage
from erag_dagster.readers.retry import BACKOFF_CAP, backoff_seconds, retry_after_seconds
from erag_dagster.readers.spec import ReaderSpec
from tests.openai_server import RateLimitProxy, TransformersServer, free_port, running_server
from tests.pipeline_fixtures import scoped_env, small_registry, write_instance_yaml

CORPUS = pl.DataFrame(
    {
        "doc_id": ["fr", "de", "wall", "sky", "jp", "bridge"],
        "title": ["France", "Germany", "", "", "Japan", ""],
        "text": [
            "Paris is the capital and largest city of France.",
            "Berlin is the capital of Germany and its largest city.",
            "The Berlin Wall fell in 1989.",
            "On a clear day the sky is blue because air scatters blue light.",
            "Tokyo is the capital of Japan.",
            "A stone bridge of nine arches, built in 1410, still carries the main road.",
        ],
    }
)
QUERIES = pl.DataFrame(
    {
        "query_id": ["q-fr", "q-wall", "q-bridge"],
        "question": [
            "What is the capital of France?",
            "In what year did the Berlin Wall fall?",
            "When was the stone bridge built?",
        ],
        "answers": [["Paris"], ["1989"], ["1410", "in 1410"]],
    }
)
DOCS = CORPUS.get_column("doc_id").to_list()
RUN = pl.DataFrame(
    {
        "query_id": [q for q in QUERIES["query_id"] for _ in DOCS],
        "doc_id": DOCS * QUERIES.height,
        "rank": list(range(1, len(DOCS) + 1)) * QUERIES.height,
    }
)  # 18 distinct pairs
EVERY_PAIR = RUN.height


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    with running_server(tmp_path_factory.mktemp("served")) as running:
        yield running


def config(base_url: str, model: str, **extra) -> dict:
    return {
        "backend": "openai", "base_url": base_url, "model": model, "answer_prefix": "",
        "concurrency": 2, "max_retries": 30, **extra,
    }  # fmt: skip


@pytest.fixture(scope="module")
def direct_answers(server: TransformersServer) -> dict[tuple[str, str], str]:
    return server_answers(server.base_url, server.model)


def server_answers(base_url: str, model: str) -> dict[tuple[str, str], str]:
    """A server's own greedy answers to every pair of ``RUN``, asked with the ``openai``
    package directly (the prompts the labeller sends)."""
    spec = ReaderSpec.from_dict(config(base_url, model), name="direct")
    client = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0)
    passages = dict(zip(CORPUS["doc_id"], CORPUS["text"], strict=True))
    questions = dict(zip(QUERIES["query_id"], QUERIES["question"], strict=True))
    titles = dict(zip(CORPUS["doc_id"], CORPUS["title"], strict=True))
    out = {}
    for qid, did in RUN.select("query_id", "doc_id").rows():
        passage = reader_passage(titles[did], passages[did])  # what the labeller shows
        response = client.chat.completions.create(
            model=model,
            messages=build_messages(spec, questions[qid], passage),
            temperature=0,
            seed=0,
            max_tokens=spec.max_new_tokens,
        )
        out[(qid, did)] = extract_answer(response.choices[0].message.content or "")
    client.close()
    return out


@pytest.mark.slow
def test_labels_through_the_server_are_its_own_answers(
    server: TransformersServer, direct_answers, tmp_path: Path
) -> None:
    reader = reader_from_config("served", config(server.base_url, server.model))
    assert isinstance(reader, OpenAIReader)
    store = LabelStore(tmp_path / "labels.sqlite")
    lines: list[str] = []
    result = label_run(RUN, QUERIES, CORPUS, reader, "em", store, log=lines.append)
    got = {(q, d): a for q, d, a in result.labels.select("query_id", "doc_id", "answer").rows()}
    assert got == direct_answers
    assert result.judged_now == EVERY_PAIR
    # the server's usage, summed: every request had prompt and completion tokens
    assert result.usage["requests"] == EVERY_PAIR
    assert result.usage["prompt_tokens"] > 30 * EVERY_PAIR
    assert 0 < result.usage["completion_tokens"] <= 16 * EVERY_PAIR
    assert result.estimate["pairs_to_generate"] == EVERY_PAIR
    mean = result.usage["prompt_tokens"] / EVERY_PAIR
    assert abs(result.estimate["mean_prompt_tokens"] - mean) < 0.5 * mean
    assert any("estimate before generating: 18 pairs" in line for line in lines)
    identity = reader.identity()
    assert identity["model"]["served"]["id"] == server.model
    assert identity["model"]["response_model"] == server.model

    # A second retriever's run: only its unseen pairs reach the server.
    before = server.requests()
    other = RUN.filter(pl.col("doc_id").is_in(["fr", "jp"]))
    again = label_run(other, QUERIES, CORPUS, reader, "em", store)
    assert again.judged_now == 0 and again.from_store == other.height
    assert server.requests() == before


@pytest.mark.slow
def test_server_stopped_and_restarted_mid_run_loses_and_duplicates_nothing(
    server: TransformersServer, direct_answers, tmp_path: Path
) -> None:
    reader = reader_from_config("served", config(server.base_url, server.model))
    store = LabelStore(tmp_path / "labels.sqlite")
    outcome: dict = {}

    def work() -> None:
        try:
            outcome["result"] = label_run(
                RUN, QUERIES, CORPUS, reader, "em", store,
                commit=CommitPolicy(every_pairs=1, every_seconds=1.0),
            )  # fmt: skip
        except BaseException as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=work)
    thread.start()
    deadline = time.monotonic() + 120
    while reader.usage()["requests"] < 4 and time.monotonic() < deadline:
        time.sleep(0.1)
    server.stop()  # in-flight requests fail; new ones are refused
    time.sleep(3)
    server.start()  # same folder, same port: the same model id
    thread.join(timeout=600)
    assert not thread.is_alive()
    assert "error" not in outcome, outcome.get("error")
    result = outcome["result"]
    assert reader.usage()["retries"] >= 1
    got = {(q, d): a for q, d, a in result.labels.select("query_id", "doc_id", "answer").rows()}
    assert got == direct_answers
    with sqlite3.connect(tmp_path / "labels.sqlite") as db:
        rows, keys = db.execute(
            "SELECT count(*), count(DISTINCT generation_key) FROM generations"
        ).fetchone()
    assert rows == keys == EVERY_PAIR


@pytest.mark.slow
def test_429_with_retry_after_is_waited_out(
    server: TransformersServer, direct_answers, tmp_path: Path
) -> None:
    with RateLimitProxy(server.port, every=3, retry_after="1") as proxy:
        reader = reader_from_config("served", config(proxy.base_url, server.model))
        began = time.monotonic()
        result = label_run(RUN, QUERIES, CORPUS, reader, "em", LabelStore(tmp_path / "l.sqlite"))
        seconds = time.monotonic() - began
    got = {(q, d): a for q, d, a in result.labels.select("query_id", "doc_id", "answer").rows()}
    assert got == direct_answers
    assert proxy.refused >= 5
    assert reader.usage()["retries"] == proxy.refused
    # each refused request waited for its Retry-After (1 s; two requests in flight)
    assert seconds >= proxy.refused * 1.0 / 2


def test_p_yes_without_logprobs_is_one_line_and_the_baseline_is_skipped(
    server: TransformersServer,
) -> None:
    from erag_dagster.meta.system_outputs import baseline_label_set

    reader = reader_from_config("served", config(server.base_url, server.model))
    reason = reader.p_yes_unavailable()
    assert reason is not None and "returns no logprobs" in reason and "\n" not in reason
    with pytest.raises(LogprobsUnavailable):
        reader.yes_probability([("q?", "p")])
    from erag_dagster.retrieval.encoder import TextEncoder

    lines: list[str] = []
    qrels = pl.DataFrame({"query_id": ["q-fr"], "doc_id": ["fr"], "relevance": [1]})
    encoder = TextEncoder(dtype="float32", batch_size=8, num_threads=1)
    labels = baseline_label_set(
        RUN.head(2), QUERIES, CORPUS, qrels, encoder, reader, log=lines.append, metric="em",
        relevance_level=1,
    )  # fmt: skip
    assert "llm_annotation" not in set(labels["method"])
    assert {"provenance", "containment"} <= set(labels["method"])
    assert lines == [f"LLM annotation baseline skipped: {reason}"]


#: Yes/no questions on the same documents (issue 43: through ``api: chat`` a served reader
#: wrote "The answer is yes. …" and ``accuracy`` scored it 0).
YES_NO = pl.DataFrame(
    {
        "query_id": ["yn-fr", "yn-wall", "yn-jp"],
        "question": [
            "Is Paris the capital of France? Answer yes or no.",
            "Did the Berlin Wall fall in 1989? Answer yes or no.",
            "Is Tokyo the capital of Germany? Answer yes or no.",
        ],
        "answers": [["yes"], ["yes"], ["no"]],
    }
)
YES_NO_RUN = pl.DataFrame(
    {
        "query_id": [q for q in YES_NO["query_id"] for _ in ("fr", "wall", "jp")],
        "doc_id": ["fr", "wall", "jp"] * 3,
        "rank": [1, 2, 3] * 3,
    }
)


@pytest.mark.slow
def test_chat_keeps_the_answer_format_and_scores_as_the_completion_api(
    server: TransformersServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    served = {
        "backend": "openai",
        "base_url": server.base_url,
        "model": server.model,
        "concurrency": 2,
        "max_retries": 30,
    }  # fmt: skip  (the default answer prefix)
    store = LabelStore(tmp_path / "labels.sqlite")
    with caplog.at_level("INFO", logger="erag_dagster.readers.openai_probe"):
        chat = reader_from_config("chat", served)  # continue_final_message: auto
        assert isinstance(chat, OpenAIReader)
        chat.load()
    # transformers serve refuses a partial assistant turn (HTTP 422): the probe saw it once,
    # and the prefix goes as an instruction, recorded in the reader's identity
    assert chat._probe().continues is False
    assert [r.message for r in caplog.records if "does not continue" in r.message]
    prompt = chat.identity()["prompt"]
    assert prompt["answer_prefix"] is None
    assert prompt["prefix_instruction"] == 'Begin your reply with "The answer is:".'
    completion = reader_from_config("completion", {**served, "api": "completion"})
    bare_chat = reader_from_config("bare", {**served, "answer_prefix": ""})
    labels = {
        name: {
            metric: label_run(run, queries, CORPUS, reader, metric, store).labels
            for metric, run, queries in (("f1", RUN, QUERIES), ("accuracy", YES_NO_RUN, YES_NO))
        }
        for name, reader in (("chat", chat), ("completion", completion), ("bare", bare_chat))
    }
    # the form: the answer alone, neither the instructed prefix nor a restatement
    for frame in labels["chat"].values():
        for answer in frame["answer"]:
            assert answer and not answer.lower().startswith(("the answer", "answer"))
            assert "\n" not in answer and len(answer.split()) <= 8, answer
    assert {a.split()[0].lower() for a in labels["chat"]["accuracy"]["answer"]} <= {"yes", "no"}
    # the score: at least the completion API's (its prompt ends with the prefix), and what
    # the chat API lost before without the prefix
    mean = {n: {m: f["label"].mean() for m, f in by.items()} for n, by in labels.items()}
    for metric in ("f1", "accuracy"):
        assert mean["chat"][metric] >= mean["completion"][metric], mean
        assert mean["chat"][metric] >= mean["bare"][metric], mean


def test_continue_final_message_true_on_a_server_that_refuses_it_is_one_line(
    server: TransformersServer,
) -> None:
    reader = reader_from_config(
        "strict", config(server.base_url, server.model, answer_prefix="The answer is:",
                         continue_final_message=True),
    )  # fmt: skip
    with pytest.raises(InputError) as err:
        reader.load()
    message = str(err.value)
    assert "continue_final_message is true" in message and "HTTP 422" in message
    assert "\n" not in message


def _label_cli(tmp_path: Path, reader_cfg: dict, capsys) -> tuple[int, str]:
    from erag_dagster.data.loaders import load_dataset
    from erag_dagster.retrieval.runs import write_trec_run

    ds = load_dataset("sample?max_questions=2")
    qrels = ds.qrels.head(2)
    run = qrels.select("query_id", "doc_id").with_columns(
        pl.lit(1).alias("rank"), pl.lit(1.0).alias("score")
    )
    write_trec_run(run, tmp_path / "run.trec")
    (tmp_path / "reader.yaml").write_text(yaml.safe_dump(reader_cfg))
    code = main(
        ["label", "--dataset", "sample?max_questions=2", "--run", str(tmp_path / "run.trec"),
         "--reader", str(tmp_path / "reader.yaml"), "--store", str(tmp_path / "s.sqlite"),
         "--output", str(tmp_path / "labels.parquet")]
    )  # fmt: skip
    return code, capsys.readouterr().err


def test_unreachable_server_is_one_line_exit_1(tmp_path: Path, storage, capsys) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    code, err = _label_cli(tmp_path, config(url, "some-model"), capsys)
    assert code == 1
    line = err.strip().splitlines()[-1]
    assert "cannot reach the OpenAI-compatible server" in line and url in line
    assert "Traceback" not in err


def test_unknown_model_is_one_line_exit_2(
    server: TransformersServer, tmp_path: Path, storage, capsys
) -> None:
    code, err = _label_cli(tmp_path, config(server.base_url, "no-such-model"), capsys)
    assert code == 2
    line = err.strip().splitlines()[-1]
    assert "does not serve model 'no-such-model'" in line and server.model in line
    assert "Traceback" not in err


def test_cli_prints_the_estimate_before_labelling(
    server: TransformersServer, tmp_path: Path, storage, capsys
) -> None:
    code, err = _label_cli(tmp_path, config(server.base_url, server.model), capsys)
    assert code == 0, err
    assert "estimate before generating: 2 pairs" in err
    assert err.index("estimate before generating") < err.index("wrote 2 labels")


def test_api_key_missing_from_env_is_one_line(tmp_path: Path, storage, capsys, monkeypatch):
    monkeypatch.delenv("ERAG_TEST_MISSING_KEY", raising=False)
    cfg = config("http://127.0.0.1:9/v1", "m", api_key_env="ERAG_TEST_MISSING_KEY")
    code, err = _label_cli(tmp_path, cfg, capsys)
    assert code == 2
    assert "ERAG_TEST_MISSING_KEY (api_key_env) is not set" in err.strip().splitlines()[-1]


@pytest.mark.slow
def test_api_key_never_reaches_storage_or_dagster_home(
    server: TransformersServer, tmp_path: Path
) -> None:
    """Through the real Dagster graph (retrieval, labels, reports): the key is sent to the server
    but no byte of it lands under the storage root or DAGSTER_HOME; the token accounting and the
    estimate are in the doc_labels metadata."""
    from erag_dagster.orchestration.pipeline import materialize_all
    from erag_dagster.orchestration.resources import EvalSettings

    secret = "sk-erag-test-" + "7f3a9c1e5b" * 3
    home = write_instance_yaml(tmp_path / "dagster_home")
    bm25 = yaml.safe_load(Path(default_registry_path()).read_text())["retrievers"]["bm25"]
    served = config(server.base_url, server.model, api_key_env="ERAG_TEST_API_KEY")
    with scoped_env(
        ERAG_STORAGE=str(tmp_path / "storage"), DAGSTER_HOME=str(home), ERAG_TEST_API_KEY=secret
    ):
        registry = small_registry(
            tmp_path / "registry", "sample?max_questions=3",
            **{"retrievers": {"bm25": bm25}, "readers": {"served": served}},
        )  # fmt: skip
        instance = dg.DagsterInstance.from_config(str(home))
        settings = EvalSettings(registry_path=str(registry))
        materialize_all(settings, instance=instance, stages=["labels"], log=lambda m: None)
        records = instance.fetch_materializations(dg.AssetKey("doc_labels"), limit=1).records
        metadata = records[0].asset_materialization.metadata
        instance.dispose()
    assert metadata["tokens_in"].value > 0 and metadata["tokens_out"].value > 0
    assert metadata["estimate_before_run"].value["pairs_to_generate"] >= 1
    needles = [secret.encode(), secret[len("sk-erag-test-") :].encode()]
    scanned = 0
    for path in tmp_path.rglob("*"):
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            scanned += 1
            assert not any(n in data for n in needles), f"API key bytes found in {path}"
    assert scanned > 5


# -- configuration and pure policies (no server) ---------------------------------------------------


@pytest.mark.parametrize(
    ("cfg", "message"),
    [
        ({"backend": "openai", "model": "m"}, "needs base_url"),
        ({"backend": "openai", "base_url": "http://h/v1"}, "needs 'model'"),
        ({"backend": "openai", "base_url": "http://h/v1", "model": "m", "dtype": "float32"},
         "'dtype' do not apply to backend 'openai'"),
        ({"base_url": "http://h/v1"}, "'base_url' do not apply to backend 'transformers'"),
        ({"backend": "openai", "base_url": "http://h/v1", "model": "m", "api_key_env": "sk-1 2"},
         "NAME of an environment variable"),
        ({"backend": "openai", "base_url": "http://h/v1", "model": "m", "api": "stream"},
         "api 'stream' unknown"),
        ({"backend": "vllm", "gpu_memory_utilization": 1.5}, "gpu_memory_utilization"),
        ({"backend": "tgi"}, "backend 'tgi' unknown"),
    ],
)  # fmt: skip
def test_bad_reader_configs_are_one_line(cfg: dict, message: str) -> None:
    with pytest.raises(InputError, match=None) as info:
        ReaderSpec.from_dict(cfg, name="r")
    assert message in str(info.value) and "\n" not in str(info.value)


def test_spec_round_trips_per_backend() -> None:
    spec = ReaderSpec.from_dict(config("http://h/v1", "m", api_key_env="KEY"), name="r")
    assert ReaderSpec.from_dict(spec.to_dict()) == spec
    assert "dtype" not in spec.to_dict() and spec.to_dict()["api_key_env"] == "KEY"
    plain = ReaderSpec.from_dict({}, name="t")
    assert "base_url" not in plain.to_dict() and plain.replace(batch_size=2).batch_size == 2


def test_backoff_is_bounded_full_jitter_and_retry_after_is_read() -> None:
    import random

    rng = random.Random(0)
    for attempt in range(12):
        wait = backoff_seconds(attempt, rng)
        assert 0 <= wait <= min(BACKOFF_CAP, 0.5 * 2**attempt)
    assert retry_after_seconds({"retry-after": "3"}) == 3.0
    assert retry_after_seconds({"retry-after": "-2"}) == 0.0
    assert retry_after_seconds({"retry-after": "soon"}) is None
    assert retry_after_seconds({}) is None
    future = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 30))
    assert 25 <= (retry_after_seconds({"retry-after": future}) or 0) <= 31


@pytest.mark.skipif(
    importlib.util.find_spec("vllm") is not None, reason="vLLM installed: the engine would start"
)
def test_vllm_without_vllm_is_one_line() -> None:
    from erag_dagster.core.errors import EnvironmentFault

    reader = reader_from_config("v", {"backend": "vllm"})
    with pytest.raises(EnvironmentFault) as info:
        reader.load()
    assert "backend vllm needs" in str(info.value) and "\n" not in str(info.value)
