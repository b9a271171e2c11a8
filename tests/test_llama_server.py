"""``backend: openai`` against a real server that returns logprobs: llama.cpp's, on loopback.

The server (tests/llama_server.py) serves the packaged SmolLM2 GGUF. P("yes") read by the
reader must equal P("yes") computed here by hand from the server's own ``top_logprobs`` for the
same relevance prompt (asked with the ``openai`` package directly), through both the chat and
the completions API; the LLM-annotation baseline must run through it (not be skipped); and the
labels must be the server's own greedy answers (the helper shared with test_openai_reader.py).
Skipped, with the reason, where ``llama-cpp-python[server]`` is not installed.
"""

from __future__ import annotations

import math
from pathlib import Path

import openai
import polars as pl
import pytest

from erag_dagster.labels.labeller import label_run
from erag_dagster.labels.store import LabelStore
from erag_dagster.readers.factory import reader_from_config
from erag_dagster.readers.openai_reader import NoFirstToken, OpenAIReader
from erag_dagster.readers.prompts import (
    RELEVANCE_SYSTEM_PROMPT,
    RELEVANCE_TEMPLATE,
    build_messages,
    plain_prompt,
    reader_passage,
)
from erag_dagster.readers.spec import ReaderSpec
from tests.llama_server import MODEL_ID, LlamaCppServer, llama_missing, running_llama_server
from tests.test_openai_reader import CORPUS, EVERY_PAIR, QUERIES, RUN, config, server_answers


@pytest.fixture(scope="module", autouse=True)
def _llama_cpp_installed() -> None:
    """Skip, with the reason, where llama.cpp's server is not installed (waits for the
    background build of ``make test`` first: :func:`tests.llama_server.llama_missing`)."""
    reason = llama_missing()
    if reason is not None:
        pytest.skip(reason)


#: Every (question, passage) pair of RUN as the labeller and the annotation baseline show it.
TEXTS = dict(zip(CORPUS["doc_id"], CORPUS["text"], strict=True))
TITLES = dict(zip(CORPUS["doc_id"], CORPUS["title"], strict=True))
QUESTIONS = dict(zip(QUERIES["query_id"], QUERIES["question"], strict=True))
PAIRS = [
    (QUESTIONS[q], reader_passage(TITLES[d], TEXTS[d]))
    for q, d in RUN.select("query_id", "doc_id").rows()
]


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory):
    with running_llama_server(tmp_path_factory.mktemp("llama")) as running:
        yield running


def top_logprobs_by_hand(server: LlamaCppServer, question: str, passage: str, api: str) -> dict:
    """The server's top log-probabilities of the first answer token to the relevance prompt,
    asked directly with the ``openai`` package: ``{token text: logprob}`` (empty when the
    model ended its answer at once)."""
    spec = ReaderSpec.from_dict(config(server.base_url, server.model, api=api), name="hand")
    messages = build_messages(
        spec, question, passage, system_prompt=RELEVANCE_SYSTEM_PROMPT,
        template=RELEVANCE_TEMPLATE, few_shot=(),
    )  # fmt: skip
    client = openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0)
    common = {"model": server.model, "max_tokens": 1, "temperature": 0, "seed": 0}
    try:
        if api == "chat":
            response = client.chat.completions.create(
                messages=messages, logprobs=True, top_logprobs=20, **common
            )
            content = response.choices[0].logprobs.content
            return {t.token: t.logprob for t in content[0].top_logprobs} if content else {}
        response = client.completions.create(
            prompt=plain_prompt(messages, ""), logprobs=5, **common
        )
        tops = response.choices[0].logprobs.top_logprobs
        return dict(tops[0]) if tops else {}
    finally:
        client.close()


@pytest.fixture(scope="module")
def chat_tops(llama: LlamaCppServer) -> list[dict]:
    """:func:`top_logprobs_by_hand` through the chat API for every pair of :data:`PAIRS`, asked
    once for the module (the P(yes) and the annotation cases compare with the same readings)."""
    return [top_logprobs_by_hand(llama, q, p, "chat") for q, p in PAIRS]


def p_yes_by_hand(top: dict) -> float:
    """yes / (yes + no) over the top tokens whose text is "yes" / "no" (case, spaces aside);
    0.5 when neither is there."""
    yes = sum(math.exp(v) for t, v in top.items() if t.strip().lower() == "yes")
    no = sum(math.exp(v) for t, v in top.items() if t.strip().lower() == "no")
    return yes / (yes + no) if yes + no > 0 else 0.5


@pytest.mark.slow
def test_p_yes_is_read_from_the_servers_logprobs(llama: LlamaCppServer, chat_tops) -> None:
    reader = reader_from_config("llama", config(llama.base_url, llama.model))
    assert isinstance(reader, OpenAIReader)
    assert reader.p_yes_unavailable() is None
    got = reader.yes_probability(PAIRS)
    tops = chat_tops
    # through the chat template yes/no are the likely first tokens, so P(yes) is a real reading
    for top in tops:
        mass = sum(math.exp(v) for t, v in top.items() if t.strip().lower() in ("yes", "no"))
        assert mass > 0.5, top
    want = [p_yes_by_hand(top) for top in tops]
    for (question, passage), g, w in zip(PAIRS, got, want, strict=True):
        assert abs(g - w) <= 1e-6, (question, passage[:40], g, w)
    assert all(0.0 < g < 1.0 for g in got) and len({round(g, 6) for g in got}) > 3


def test_completion_api_p_yes_or_one_line_where_the_model_ends_at_once(
    llama: LlamaCppServer,
) -> None:
    """Through ``/v1/completions`` (plain prompt, no chat template) SmolLM2 often ends its answer
    at once: that pair is one line naming it (not "no logprobs", not a made-up 0.5); the others
    equal P(yes) by hand from the top 5 tokens."""
    reader = reader_from_config("llama", config(llama.base_url, llama.model, api="completion"))
    ended, read = 0, 0
    for question, passage in PAIRS[:8]:
        top = top_logprobs_by_hand(llama, question, passage, "completion")
        if not top:
            with pytest.raises(NoFirstToken) as info:
                reader.yes_probability([(question, passage)])
            line = str(info.value)
            assert "ended its answer at once" in line and question in line and "\n" not in line
            ended += 1
        else:
            assert (
                abs(reader.yes_probability([(question, passage)])[0] - p_yes_by_hand(top)) <= 1e-6
            )
            read += 1
    assert ended >= 1 and read >= 1


@pytest.mark.slow
def test_llm_annotation_baseline_runs_through_the_server(
    llama: LlamaCppServer, chat_tops, tmp_path: Path
) -> None:
    from erag_dagster.meta.system_outputs import baseline_label_set
    from erag_dagster.retrieval.encoder import TextEncoder

    reader = reader_from_config("llama", config(llama.base_url, llama.model))
    lines: list[str] = []
    qrels = pl.DataFrame({"query_id": ["q-fr"], "doc_id": ["fr"], "relevance": [1]})
    encoder = TextEncoder(dtype="float32", batch_size=8, num_threads=1)
    store = LabelStore(tmp_path / "labels.sqlite")
    labels = baseline_label_set(
        RUN, QUERIES, CORPUS, qrels, encoder, reader, store=store, log=lines.append,
        metric="em", relevance_level=1,
    )  # fmt: skip
    assert f"LLM annotation of {EVERY_PAIR} (question, document) pairs" in lines
    assert not any("skipped" in line for line in lines)
    annotated = labels.filter(pl.col("method") == "llm_annotation")
    assert annotated.height == EVERY_PAIR
    got = {(q, d): lab for q, d, lab in annotated.select("query_id", "doc_id", "label").rows()}
    want = {
        (q, d): float(p_yes_by_hand(top) >= 0.5)
        for (q, d), top in zip(RUN.select("query_id", "doc_id").rows(), chat_tops, strict=True)
    }
    assert got == want


@pytest.mark.slow
def test_labels_through_the_server_are_its_own_answers(
    llama: LlamaCppServer, tmp_path: Path
) -> None:
    reader = reader_from_config("llama", config(llama.base_url, llama.model))
    result = label_run(RUN, QUERIES, CORPUS, reader, "em", LabelStore(tmp_path / "l.sqlite"))
    got = {(q, d): a for q, d, a in result.labels.select("query_id", "doc_id", "answer").rows()}
    assert got == server_answers(llama.base_url, llama.model)
    assert result.judged_now == EVERY_PAIR
    assert result.usage["requests"] == EVERY_PAIR and result.usage["prompt_tokens"] > 0
    assert reader.identity()["model"]["served"]["id"] == MODEL_ID
