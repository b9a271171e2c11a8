"""The parts of the HTML report a person reads first (:mod:`erag_dagster.reports.html`): the
verdict, what the numbers mean, the worked examples and the fit diagnostics' warnings.

Each function takes the run's objects (a :class:`~erag_dagster.reports.verdict.Verdict`, the
eRAG leaderboard, :class:`~erag_dagster.reports.html_examples.WorkedExample` s) and the display
names of the partition keys, and returns escaped HTML; none computes a statistic.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import polars as pl

from erag_dagster.core.input_numbers import format_given
from erag_dagster.meta.fit import EXPECTED_PREFIX
from erag_dagster.reports.html_blocks import absent, esc, note, rows_table
from erag_dagster.reports.html_chart import ci_chart_svg
from erag_dagster.reports.html_examples import WorkedExample, marked_spans
from erag_dagster.reports.html_words import FAMILIES, label_sentence, metric_sentence
from erag_dagster.reports.tables import MISSING
from erag_dagster.reports.verdict import Verdict


def verdict_html(v: Verdict, names: Mapping[str, str]) -> str:
    """Per reader of ``v``: its sentence, the chart of each retriever's score with its CI, and
    every pair with its difference [CI], the Holm p that decides it (printed as the terminal
    prints it) and the decision; then the verdict's test family in words. ``names``: display
    names of the partition keys."""
    parts = []
    for reader in v.readers:
        ranks = v.ranking.filter(pl.col("reader") == reader).sort("rank")
        pairs = v.pairs.filter(pl.col("reader") == reader)
        reader_name = names.get(reader, reader)
        parts.append(
            f'<p class="sentence">Reader <strong>{esc(reader_name)}</strong>: '
            f"{esc(v.sentences[reader])}</p>"
        )
        parts.append(
            ci_chart_svg(
                list(ranks.iter_rows(named=True)), v.metric, names,
                f"eRAG {v.metric} of each retriever with reader {reader_name}",
                v.statistics.percent,
            )
        )  # fmt: skip
        if pairs.height:
            rows = [
                (False, [
                    f"{names.get(p['higher'], p['higher'])} − {names.get(p['lower'], p['lower'])}",
                    f"{p['difference']:+.3f} [{p['low']:+.2f}, {p['high']:+.2f}]",
                    f"p = {_p(p['p_holm'])}",  # as the terminal prints it
                    "differ" if p["significant"] else "indistinguishable",
                    str(p["queries"]),
                ])
                for p in pairs.iter_rows(named=True)
            ]  # fmt: skip
            headers = [
                "pair", f"difference [{v.statistics.percent} CI]", "p (Holm)", "decision",
                "questions",
            ]  # fmt: skip
            parts.append(rows_table(headers, rows, [False, True, True, False, True], "pairs"))
    m = max((v.pairs.filter(pl.col("reader") == r).height for r in v.readers), default=0)
    if m:  # one retriever: no pair, no test to name
        parts.append(note(FAMILIES["verdict"].format(m=m, alpha=format_given(v.alpha))))
    return "\n".join(parts)


def meaning_html(
    board: pl.DataFrame | None,
    downstream: str | None,
    names: Mapping[str, str],
    reference: str | None = None,
) -> str:
    """What a label is, then one sentence per list metric of the eRAG leaderboard ``board``,
    its example value the top retriever's with the board's first reader; ``downstream``: the
    reader's metric behind the labels; ``reference``: what they score against when it is not
    the gold answers (:func:`~.html_words.reference_sentence`)."""
    if board is None or not board.height:
        return absent("no eRAG labels in this run")
    metrics = board.get_column("metric").unique(maintain_order=True).to_list()
    reader = board.get_column("reader")[0]
    items = []
    for metric in metrics:
        rows = board.filter((pl.col("reader") == reader) & (pl.col("metric") == metric))
        best = rows.sort(["mean", "retriever"], descending=[True, False]).row(0, named=True)
        who = f"{names.get(best['retriever'], best['retriever'])} with {names.get(reader, reader)}"
        items.append(f"<li>{esc(metric_sentence(metric, best['mean']))} ({esc(who)})</li>")
    return f"<p>{esc(label_sentence(downstream, reference))}</p><ul>{''.join(items)}</ul>"


def examples_html(examples: Sequence[WorkedExample], metric: str, names: Mapping[str, str]) -> str:
    """The question where the retrievers disagree most (the examples share it), its gold
    answers (or the reference answer the labels score against), then one card per retriever:
    its score on ``metric`` there, its best document's excerpt (gold answers marked), the
    reader's answer and its label. None: one line."""
    if not examples:
        return absent("no worked example: no eRAG labels (or no question text) in this run")
    first = examples[0]
    spread = max(e.score for e in examples) - min(e.score for e in examples)
    gold = ", ".join(f"“{g}”" for g in first.gold) or MISSING
    against = "Reference answer (not gold)" if first.reference else "Gold answer"
    head = (
        f"<p>The retrievers disagree most on question <code>{esc(first.query_id)}</code> "
        f"(reader {esc(names.get(first.reader, first.reader))}: eRAG {esc(metric)} differs by "
        f"{spread:.2f} between them). <strong>Question:</strong> {esc(first.question)} "
        f"<strong>{against}:</strong> {esc(gold)}</p>"
    )
    cards = []
    for e in examples:
        text = "".join(
            f"<mark>{esc(part)}</mark>" if gold_part else esc(part)
            for part, gold_part in marked_spans(e.excerpt, e.gold)
        )
        cards.append(
            '<div class="example">'
            f"<h4>{esc(names.get(e.retriever, e.retriever))} "
            f"<small>(eRAG {esc(metric)} here: {e.score:.2f})</small></h4>"
            f'<p class="note">its best document: <code>{esc(e.doc_id)}</code>, rank {e.rank}</p>'
            f"<blockquote>{text or esc(MISSING)}</blockquote>"
            f"<p>Reader's answer: <strong>“{esc(e.answer)}”</strong> → label "
            f"<strong>{e.label:.2f}</strong></p></div>"
        )
    return head + f'<div class="examples">{"".join(cards)}</div>'


def fit_html(warnings: Sequence[str]) -> str:
    """The fit diagnostics' lines as a list: warnings, then the findings declared expected
    (lines starting ``fit, expected``, shown as notes); no warning: "no warning" first."""
    expected = [w for w in warnings if w.startswith(EXPECTED_PREFIX)]
    found = [w for w in warnings if not w.startswith(EXPECTED_PREFIX)]
    parts = []
    if found:
        parts.append(
            '<ul class="warnings">' + "".join(f"<li>{esc(w)}</li>" for w in found) + "</ul>"
        )
    else:
        parts.append('<p class="note">No warning: the labels fit the data by every check.</p>')
    if expected:
        items = "".join(f"<li>{esc(w)}</li>" for w in expected)
        parts.append(f'<ul class="note">{items}</ul>')
    return "".join(parts)


def _p(value: float) -> str:
    return "<0.001" if value < 0.001 else f"{value:.3f}"
