"""Reader backends: one protocol, one options class each, one registration line each.

* every registered backend's reader class has every member of
  :class:`~erag_dagster.readers.protocol.ReaderBackend` with a compatible signature (checked on
  the classes and on unloaded instances: no model loads, no server is asked);
* a backend's keys are its options class's fields, refused on the other backends, defaulted
  and validated there;
* the fingerprints and spec mappings of the packaged readers and of openai and vllm specs are
  those computed before the options classes existed (the label store keys answers by
  fingerprint, so a refactoring of the spec must not move one byte of them).
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle
import subprocess
import sys
from functools import cached_property
from typing import Any

import pytest
import torch

from erag_dagster.config.registry import load_registry
from erag_dagster.core.errors import InputError
from erag_dagster.core.hashing import sha256_json
from erag_dagster.readers.backends import BACKENDS
from erag_dagster.readers.factory import reader_class, reader_for_spec, reader_from_config
from erag_dagster.readers.fingerprint import fingerprint_of, reader_identity
from erag_dagster.readers.openai_options import OpenAIOptions
from erag_dagster.readers.openai_probe import ServerInfo
from erag_dagster.readers.protocol import ReaderBackend
from erag_dagster.readers.spec import COMMON_KEYS, ReaderSpec, backend_keys
from erag_dagster.readers.transformers_options import TransformersOptions
from erag_dagster.readers.vllm_options import VLLMOptions

#: The least config each backend builds a spec from (openai needs a server and a model id).
MINIMAL: dict[str, dict[str, Any]] = {
    "openai": {"base_url": "http://127.0.0.1:9/v1", "model": "m"},
}


OPENAI_MINIMAL = {"backend": "openai", **MINIMAL["openai"]}


def minimal_spec(backend: str) -> ReaderSpec:
    return ReaderSpec.from_dict({"backend": backend, **MINIMAL.get(backend, {})}, name="r")


# -- the protocol --------------------------------------------------------------------------------


def protocol_members() -> dict[str, Any]:
    """Name → the protocol's definition (a function, a property, or ``None`` for a data
    attribute) of every member of ReaderBackend."""
    members: dict[str, Any] = dict.fromkeys(ReaderBackend.__annotations__)
    for name, value in vars(ReaderBackend).items():
        if isinstance(value, property) or (inspect.isfunction(value) and not name.startswith("_")):
            members[name] = value
    return members


def test_the_protocol_names_what_callers_use() -> None:
    assert set(protocol_members()) == {
        "spec", "name", "fingerprint", "short_fingerprint", "identity", "load", "close",
        "answer", "answer_with_context", "answer_with_contexts", "yes_probability",
        "count_tokens", "estimate_prompt_tokens", "usage",
    }  # fmt: skip


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_every_registered_backend_satisfies_the_protocol(backend: str) -> None:
    """Methods: present, with the protocol's parameters in its order and kinds (extra ones
    have defaults); properties: properties; ``spec``: set by the constructor."""
    cls = reader_class(backend)
    assert isinstance(cls, type) and cls.__name__ == BACKENDS[backend].reader.split(":")[1]
    reader = reader_for_spec(minimal_spec(backend))  # nothing loaded, no server asked
    assert type(reader) is cls and vars(reader)["spec"].backend == backend
    for name, wanted in protocol_members().items():
        if wanted is None:
            continue
        got = inspect.getattr_static(cls, name, None)
        assert got is not None, f"{cls.__name__} lacks {name}"
        if isinstance(wanted, property):
            assert isinstance(got, property | cached_property), f"{cls.__name__}.{name}"
            continue
        have = inspect.signature(got).parameters
        need = inspect.signature(wanted).parameters
        assert list(have)[: len(need)] == list(need), f"{cls.__name__}.{name}: {list(have)}"
        for key, param in need.items():
            assert have[key].kind == param.kind, f"{cls.__name__}.{name}({key})"
            assert (have[key].default is inspect.Parameter.empty) == (
                param.default is inspect.Parameter.empty
            ), f"{cls.__name__}.{name}({key}) default"
        extra = list(have)[len(need) :]
        assert all(have[k].default is not inspect.Parameter.empty for k in extra), (
            f"{cls.__name__}.{name}: extra parameters {extra} need defaults"
        )


# -- the options classes ---------------------------------------------------------------------------


def test_each_backends_keys_are_its_options_fields() -> None:
    """The key sets the flat spec wrote out by hand, now derived from the options classes."""
    local = {"gguf_file", "revision", "allow_download", "dtype"}
    transformers = local | {"share_prefix", "stop_at_line_end"}
    assert backend_keys("transformers") - COMMON_KEYS == transformers
    assert backend_keys("vllm") - COMMON_KEYS == local | {
        "tensor_parallel_size", "gpu_memory_utilization", "max_model_len",
    }  # fmt: skip
    assert backend_keys("openai") - COMMON_KEYS == {
        "base_url", "api_key_env", "allow_link_local", "api", "continue_final_message",
        "concurrency", "timeout_seconds", "max_retries",
    }  # fmt: skip
    assert {b: type(minimal_spec(b).options) for b in BACKENDS} == {
        "transformers": TransformersOptions, "openai": OpenAIOptions, "vllm": VLLMOptions,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("cfg", "message"),
    [
        ({"backend": "vllm", "share_prefix": True}, "'share_prefix' do not apply to backend"),
        ({"tensor_parallel_size": 2}, "'tensor_parallel_size' do not apply to backend 'transf"),
        ({"backend": "vllm", "max_model_len": "long"}, "max_model_len must be an integer, got"),
        ({"backend": "vllm", "max_model_len": 8}, "max_model_len must be >= 16 or null"),
        ({"backend": "vllm", "tensor_parallel_size": 0}, "tensor_parallel_size must be an int"),
        ({"backend": "vllm", "dtype": "int8"}, "dtype 'int8' unknown"),
        ({**OPENAI_MINIMAL, "timeout_seconds": 0}, "timeout_seconds must be > 0"),
        ({**OPENAI_MINIMAL, "concurrency": True}, "concurrency must be an integer"),
        ({**OPENAI_MINIMAL, "allow_link_local": "yes"}, "allow_link_local must be true or false"),
        ({**OPENAI_MINIMAL, "model": "packaged:gemma3-270m"}, "needs 'model'"),
        ({"share_prefix": "sometimes"}, "share_prefix must be true, false or auto"),
        ({"seed": -1}, "seed must be an integer >= 0"),
        ({"backend": 7}, "backend '7' unknown; use transformers, openai, vllm"),
    ],
)  # fmt: skip
def test_each_backend_validates_its_own_keys_in_one_line(cfg: dict, message: str) -> None:
    with pytest.raises(InputError) as info:
        ReaderSpec.from_dict(cfg, name="r")
    assert message in str(info.value) and "reader 'r'" in str(info.value)
    assert "\n" not in str(info.value)


def test_options_read_as_spec_attributes_and_survive_copies() -> None:
    spec = minimal_spec("openai")
    assert spec.base_url == spec.options.base_url == "http://127.0.0.1:9/v1"
    assert (spec.concurrency, spec.api, spec.timeout_seconds) == (4, "chat", 120.0)
    with pytest.raises(AttributeError, match="'dtype'"):
        spec.dtype  # noqa: B018  (a key of another backend is not an attribute)
    assert not hasattr(minimal_spec("transformers"), "base_url")
    fewer = dataclasses.replace(spec, max_new_tokens=1)
    assert fewer.max_new_tokens == 1 and fewer.options is spec.options
    for again in (copy.deepcopy(spec), pickle.loads(pickle.dumps(spec))):
        assert again == spec and again.base_url == spec.base_url
    assert spec.replace(concurrency=9).concurrency == 9


def test_built_directly_a_spec_takes_its_backends_options_only() -> None:
    assert ReaderSpec(name="r", backend="vllm").options == VLLMOptions()
    built = ReaderSpec(name="r", backend="vllm", options=VLLMOptions(max_model_len=64))
    assert built.max_model_len == 64 and built.to_dict()["max_model_len"] == 64
    with pytest.raises(InputError, match="backend 'openai' takes OpenAIOptions, not Transf"):
        ReaderSpec(name="r", backend="openai", options=TransformersOptions())
    with pytest.raises(InputError, match="gpu_memory_utilization must be in"):
        ReaderSpec(name="r", backend="vllm", options=VLLMOptions(gpu_memory_utilization=0.0))


def test_parsing_any_spec_and_building_an_openai_reader_import_no_torch() -> None:
    """Spec parsing knows every backend's keys, so it imports every options class: those are
    light; a reader class is imported only when a reader of its backend is built, and the
    openai reader's own modules import neither torch, transformers nor vllm (nor the
    ``openai`` package before the first request)."""
    code = (
        "import sys; from erag_dagster.readers.spec import ReaderSpec; "
        "from erag_dagster.readers.factory import reader_from_config; "
        f"minimal = {MINIMAL!r}; "
        "[ReaderSpec.from_dict({'backend': b, **minimal.get(b, {})}, name='r') "
        "for b in ('transformers', 'openai', 'vllm')]; "
        "reader_from_config('o', {'backend': 'openai', **minimal['openai']}); "
        "heavy = ('torch', 'vllm', 'transformers', 'openai'); "
        "print(' '.join(m for m in heavy if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""


# -- fingerprints stay byte-identical ------------------------------------------------------------

#: Computed at 40b3423 (the flat ReaderSpec, before the options classes) and recomputed once on
#: purpose by issue 43 (the extraction's version, the span presets' prompts and 24 tokens and the
#: chat mode resolved by the probe enter the identity), with this environment's torch and
#: transformers (the library versions are part of a local reader's identity, as in the seeded
#: answers of tests/answers/: a library upgrade moves both). Any other move is a regression.
BEFORE: dict[str, str] = {
    "openai-chat": "26f31f5ac794b9ed158d18d29c392e08996c31f9b2965de1f1849ad2fd78759f",
    "openai-completion": "38cd447704673b2e8b5fcad4a7da587b29a0626da6a8877ea3a9e4a6cf640dfb",
    "openai-continue": "18633874d7d77e052755b42f0dffc42d2d2241867101d40fad990d1f2348d888",
    "registry:gemma3-270m": "59ec88465dbf35fe916a12975ac2fa18ba77b376e03ad0c58c96f01674dd9be4",
    "registry:smollm2-135m": "02df0858a92c23bcba0bf0a361cb2de4239cead0e27336ef31bde58251a727d9",
    "transformers": "971f2c92f2cce0b644bbcfbca497459c0c45b48104aeed733c93fb76c8ad8769",
    "vllm": "0f5650c26a011b2167040abd5c06ff1fd8007a910e5f92bb18d54422c96fa5cb",
}
#: sha256 of the canonical JSON of ``spec.to_dict()`` (what a Ray actor rebuilds a reader from
#: and the store records), computed at the same commits.
SPECS_BEFORE: dict[str, str] = {
    "openai-chat": "6cf9115205ec3197883587fc19f97aec2be8faca0acec3602d59f67dce2b579e",
    "openai-completion": "3a38d956dfb1578b9a13e9d3aae08e047d2bfcb090864042328cca80a47ca173",
    "openai-continue": "7b19df7f48860f89763211b24a3dc6b78007e89bcb99d952ae77b99903cb2211",
    "transformers": "98c83dc9da40e439cc6b156ae3925be6fd4f8247aa4243e8f20eeaf37784bb8d",
    "vllm": "e57279403f8d1c57acda1c73ac606199af01d446ddf00196769440b5faaf2789",
}

TRANSFORMERS = {
    "model": "packaged:smollm2-135m-instruct", "max_new_tokens": 8, "max_input_tokens": 256,
    "system_prompt": "Be brief.", "answer_prefix": "A:", "share_prefix": False,
    "stop_at_line_end": False, "batch_size": 3, "num_threads": 1,
    "few_shot": [{"question": "q?", "passage": "p.", "answer": "a"}],
}  # fmt: skip
OPENAI = {
    "openai-chat": {
        "backend": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "m", "num_threads": 1,
    },
    "openai-completion": {
        "backend": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "m",
        "api": "completion", "api_key_env": "MY_KEY", "concurrency": 2, "seed": 3,
        "answer_prefix": "A:", "timeout_seconds": 5, "max_retries": 1, "max_new_tokens": 4,
        "num_threads": 1,
    },
    "openai-continue": {
        "backend": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "m",
        "continue_final_message": True, "num_threads": 1,
    },
}  # fmt: skip
#: What a probe of such a server returns (the identity of a remote model is what it reports).
SERVED = ServerInfo({"id": "m", "owned_by": "me", "max_model_len": 2048}, "m", "fp_abc", 0.25)
VLLM = {
    "backend": "vllm", "model": "packaged:smollm2-135m-instruct", "dtype": "float32",
    "tensor_parallel_size": 2, "gpu_memory_utilization": 0.5, "max_model_len": 1024, "seed": 7,
    "num_threads": 1,
}  # fmt: skip


def test_fingerprints_and_spec_mappings_are_those_of_the_flat_spec() -> None:
    fingerprints, specs = {}, {}
    for name, entry in load_registry().readers.items():
        fingerprints[f"registry:{name}"] = reader_from_config(name, dict(entry.config)).fingerprint
    reader = reader_from_config("t", TRANSFORMERS)
    fingerprints["transformers"] = reader.fingerprint
    specs["transformers"] = sha256_json(reader.spec.to_dict())
    for label, cfg in OPENAI.items():
        reader = reader_from_config("o", cfg)
        # the probe's result, no server: a server asked to continue the turn accepted it
        continues = cfg.get("continue_final_message") is True
        reader._info = dataclasses.replace(SERVED, continues=continues)  # type: ignore[attr-defined]
        fingerprints[label] = reader.fingerprint
        specs[label] = sha256_json(reader.spec.to_dict())
    # VLLMReader's own identity needs vllm and a GPU: this is its spec's part, on the CPU
    spec = ReaderSpec.from_dict(VLLM, name="v")
    identity = reader_identity(spec, None, torch.float32, torch.device("cpu"))
    fingerprints["vllm"] = fingerprint_of(identity)
    specs["vllm"] = sha256_json(spec.to_dict())
    assert fingerprints == BEFORE
    assert specs == SPECS_BEFORE
