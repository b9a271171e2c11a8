"""Versions of the code whose outputs are stored or materialised, declared once next to it.

Every piece of code that decides a stored value or a materialised asset — a downstream metric
(:mod:`erag_dagster.metrics.downstream`), the prompt builder and the answer post-processing
(:mod:`erag_dagster.readers.prompts`), a label method's task (eRAG's closed-book term, the
likelihood labels, the LLM annotation, the end-to-end answers) — declares one
:class:`CodeVersion` ``(name, version)`` beside its code. Whoever changes what that code
computes raises its version; nothing else has to be edited:

* **store keys** — the version is part of the key of every value the code produced, so a stored
  value of the old code is never served for the new one (the old rows stay, auditable):

  - a *metric* or the *prompt builder* predates its version: at version ``"1"`` it
    contributes NOTHING to its key (:attr:`CodeVersion.tag` is the bare name), so every score
    and answer stored before versions existed — the seeded answer files included — keeps its
    key; from version ``"2"`` on, ``name/vN`` joins the key (:func:`key_parts`);
  - a *task* (closed book, likelihood, annotation, end to end) always carried ``name/vN`` in its
    task fingerprint (:attr:`CodeVersion.task`), version 1 included;

* **Dagster** — each asset's ``code_version`` is derived from the versions its computation
  depends on (:func:`asset_code_version`): ``"1"`` while all of them are at version 1 (what
  every asset declared before), else ``"1+"`` followed by the tags above version 1, sorted
  (``"1+f1/v2"``). Raising a version therefore marks exactly the assets that depend on it
  stale (``dagster/code_version`` of their last materialisation differs), and their
  automation condition (``code_version_changed``) recomputes them; the stored values they
  did not change (answers whose reader input is the same) are read from the store.

Versions are non-empty strings of digits (``"1"``, ``"2"``, ...); a name is non-empty and has no
``/`` or ``+`` (they separate the parts of a tag).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["BASE_CODE_VERSION", "INITIAL", "CodeVersion", "asset_code_version", "key_parts"]

INITIAL = "1"
"""The version of every piece of code as it was before versions were declared."""

BASE_CODE_VERSION = "1"
"""The ``code_version`` every asset carried before it was derived (see the module docstring)."""


@dataclass(frozen=True)
class CodeVersion:
    """One versioned piece of code: ``name`` (what it is called in keys and tags) and
    ``version`` (a string of digits; raise it when what the code computes changes)."""

    name: str
    version: str = INITIAL

    def __post_init__(self) -> None:
        if not self.name or any(c in self.name for c in "/+"):
            raise ValueError(f"code version name must be non-empty without / or +: {self.name!r}")
        if not (isinstance(self.version, str) and self.version.isdigit()):
            raise ValueError(f"{self.name}: version must be a string of digits: {self.version!r}")

    @property
    def initial(self) -> bool:
        """Whether this is version 1 (the code as it was before versions were declared)."""
        return self.version == INITIAL

    @property
    def tag(self) -> str:
        """``name`` at version 1, else ``name/vN``: what a key or a code version records."""
        return self.name if self.initial else self.task

    @property
    def task(self) -> str:
        """``name/vN`` at every version (task fingerprints always carried it)."""
        return f"{self.name}/v{self.version}"


def key_parts(versions: Iterable[CodeVersion]) -> list[str]:
    """The tags of ``versions`` above version 1, in the order given: what they add to a key
    (``[]`` while all are at version 1, so keys written before versions existed hold)."""
    return [v.tag for v in versions if not v.initial]


def asset_code_version(versions: Iterable[CodeVersion]) -> str:
    """An asset's Dagster ``code_version`` from the versions its computation depends on:
    :data:`BASE_CODE_VERSION` while all are at version 1, else ``"1+"`` and the distinct tags
    above version 1, sorted and joined by ``+`` (``"1+f1/v2+prompt_builder/v3"``)."""
    bumped = sorted(set(key_parts(versions)))
    return "+".join([BASE_CODE_VERSION, *bumped])
