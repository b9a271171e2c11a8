"""The prompts readers answer with by default, chosen on data and declared here once.

A reader entry that does not set ``system_prompt``, ``answer_prefix``, ``few_shot`` or
``max_new_tokens`` gets them from its **preset** (:class:`~.spec.ReaderSpec`'s
``prompt_preset``):

* ``span`` (the default): short answers copied from the passage (SQuAD-like data, metrics
  ``em``, ``f1``, ``contains``). Each packaged reader has its own, chosen on the tuning split of
  the embedded sample by label-vs-judgment AUC, share of answers cut and decoding cost
  (``scripts/tune_prompts.py``; the table in docs/label-methods.md, "Prompts chosen on data");
  any other model gets the instruct reader's (:data:`GENERIC_MODEL`).
* ``label``: answers from a closed label set (``metric: accuracy``: yes/no/maybe, options):
  the recommendation of docs/label-methods.md ("Label-set answers: one recommendation"),
  chosen on the tuning halves of two label sets (``scripts/measure_label_sets.py``).

Keys set in the entry always win. The preset's text enters the reader fingerprint like any
prompt (a changed preset is a new reader identity, never a stale answer), and
:data:`PRESETS`'s version the ``code_version`` of the assets that hold answers, so raising it
when a preset changes marks them stale (:mod:`erag_dagster.core.code_versions`).

This module is the one place later measurements read the chosen prompts from.
"""

from __future__ import annotations

from dataclasses import dataclass

from erag_dagster.core.code_versions import CodeVersion

__all__ = [
    "GENERIC_MODEL",
    "PRESETS",
    "PRESET_KINDS",
    "ReaderPreset",
    "preset_for",
]

#: The presets' version (module docstring): 1 was the hand-written prompt every reader shared.
PRESETS = CodeVersion("prompt_presets", "2")

PRESET_KINDS = ("span", "label")
"""Values of a reader's ``prompt_preset``."""


@dataclass(frozen=True)
class ReaderPreset:
    """One preset: the system turn, the text that opens the answer, worked examples as
    ``(question, passage, answer)`` triples, and the generated-token cap."""

    system_prompt: str
    answer_prefix: str
    few_shot: tuple[tuple[str, str, str], ...]
    max_new_tokens: int


#: The prompt of extraction version 1 (the hand-written one every reader shared).
SPAN_SYSTEM_PROMPT = (
    "You answer questions about a passage. Reply with a short answer of a few words copied "
    "from the passage, not a sentence."
)

#: The worked example offered to the tuning (``scripts/tune_prompts.py``): SQuAD v1.1 dev,
#: article "Normans" (not in the embedded sample), its paragraph's first two sentences.
NORMANS_EXAMPLE = (
    "Who was the Norse leader?",
    "The Normans (Norman: Nourmands; French: Normands; Latin: Normanni) were the people who in "
    "the 10th and 11th centuries gave their name to Normandy, a region in France. They were "
    'descended from Norse ("Norman" comes from "Norseman") raiders and pirates from Denmark, '
    "Iceland and Norway who, under their leader Rollo, agreed to swear fealty to King Charles "
    "III of West Francia.",
    "Rollo",
)

GENERIC_MODEL = "packaged:smollm2-135m-instruct"
"""The model whose span preset any other model gets (an instruct model with a chat template)."""

SPAN_PRESETS: dict[str, ReaderPreset] = {
    "packaged:smollm2-135m-instruct": ReaderPreset(SPAN_SYSTEM_PROMPT, "The answer is:", (), 24),
    "packaged:gemma3-270m": ReaderPreset(SPAN_SYSTEM_PROMPT, "The answer is:", (), 24),
}
"""Span presets per packaged model (module docstring), chosen on the tuning split (90
questions, 270 pairs, bm25 top 3; ``reproductions/data/prompt_tuning/results_*.json``): for
both readers the packaged prompt without a worked example (the example lowered the AUC for
both: SmolLM2 0.612 vs 0.623, Gemma 0.656 vs 0.688 at 24 tokens) with clause extraction and
24 tokens — the first cap that cuts under the fit check's 10 % (SmolLM2 3.7 %, Gemma 6.3 %;
22.6 % and 12.2 % at 16). Label-vs-judgment AUC, new vs the hand-written prompt at 16 tokens
with sentence extraction: SmolLM2 0.623 [0.578, 0.671] vs 0.612, difference +0.010
[-0.009, +0.032]; Gemma 0.688 [0.629, 0.747] vs 0.675, +0.013 [-0.009, +0.036] — neither
difference is significant: the gain is fewer answers cut, not better separation."""

LABEL_PRESET = ReaderPreset(
    "You answer questions about a passage. Reply with one word: the label the question asks for.",
    "The answer is:",
    (),
    8,
)
"""The label-set preset (module docstring), the same for every model."""


def preset_for(model: str, kind: str = "span") -> ReaderPreset:
    """The preset of ``kind`` (:data:`PRESET_KINDS`) for ``model`` (a reader's ``model``);
    ``ValueError`` for another kind."""
    if kind == "label":
        return LABEL_PRESET
    if kind != "span":
        raise ValueError(f"prompt_preset must be one of {', '.join(PRESET_KINDS)}, got {kind!r}")
    return SPAN_PRESETS.get(model, SPAN_PRESETS[GENERIC_MODEL])
