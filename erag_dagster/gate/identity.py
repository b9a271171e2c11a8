"""What a gate evaluation is, apart from the retriever: its identity, and the baseline file.

Two evaluations may be compared only when they measure the same thing, i.e. every field of
:class:`EvalIdentity` is equal; the retriever (what a gate compares) is kept beside it, in
:class:`RetrieverIdentity`, and may differ.

The baseline file that stores both: :mod:`erag_dagster.gate.baseline_file`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from erag_dagster.core.errors import InputError
from erag_dagster.gate.escape import shown

LABEL_METHOD = "erag"
"""The only labelling method of the gate: the reader answers from each document alone (eRAG)."""


@dataclass(frozen=True)
class EvalIdentity:
    """Everything that decides a gate's numbers except the retriever.

    ``dataset_digest``: :func:`erag_dagster.config.inputs.dataset_digest` of the spec (its files'
    content and options); ``reader_fingerprint``: the reader's full fingerprint (model files,
    prompt, decoding); ``label_method``: :data:`LABEL_METHOD`; ``downstream_metric``: scores an
    answer against the gold answers (``em``, ``f1``, ...); ``metrics``: the list metrics, as
    given; ``k``: documents labelled and scored per query.
    """

    dataset_digest: str
    reader_fingerprint: str
    label_method: str
    downstream_metric: str
    metrics: tuple[str, ...]
    k: int

    def differences(self, other: EvalIdentity) -> list[str]:
        """``"field: mine vs other"`` for each field that differs (hashes cut to 12 digits)."""

        def brief(value: Any) -> str:
            if isinstance(value, tuple):
                return shown(",".join(value))
            text = str(value)
            return shown(text[:12] if len(text) == 64 else text)

        out = []
        for field in fields(self):
            mine, theirs = getattr(self, field.name), getattr(other, field.name)
            if mine != theirs:
                out.append(f"{field.name} {brief(mine)} vs {brief(theirs)}")
        return out


@dataclass(frozen=True)
class RetrieverIdentity:
    """What produced a run: ``kind`` ``registry`` (``name``, ``digest`` the registry entry's
    content hash), ``run_file`` (``name`` the path, ``digest`` the file's sha256) or whatever a
    baseline file recorded."""

    kind: str
    name: str
    digest: str

    @property
    def label(self) -> str:
        """A short name for reports (``bm25-1a2b3c4d``, ``runs/new.trec``)."""
        return f"{self.name}-{self.digest[:8]}" if self.kind == "registry" else self.name


def refuse_other_identity(
    baseline: EvalIdentity, candidate: EvalIdentity, baseline_ref: str, candidate_ref: str
) -> None:
    """One :class:`InputError` line naming every field that differs (nothing if none)."""
    differ = baseline.differences(candidate)
    if differ:
        raise InputError(
            f"cannot compare {shown(candidate_ref)} with baseline {shown(baseline_ref)}: they "
            "were evaluated "
            f"differently ({'; '.join(differ)}); only the retriever may differ"
        )
