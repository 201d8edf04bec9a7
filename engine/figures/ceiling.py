"""A run's decode speed per request against the most its memory bandwidth allows (engine.measure.judge.ceiling).
See docs/measuring.md#ceiling."""
from __future__ import annotations

from collections.abc import Iterable

import plotly.graph_objects as go

from engine.digits import significant
from engine.figures.theme import BASE_SIZE, INK, MUTED, esc, finish, is_placeholder, run_colors, run_label, wrap
from engine.measure.judge.ceiling import RunCeiling, run_ceiling
from engine.messages import say, translate
from engine.results.records import RunResult

CEILING_FILL = "#e9e9e9"


def ceiling_bars(runs: Iterable[RunResult | None], *, lang: str = "en") -> go.Figure:
    """One row per run that has a ceiling (runs without one are left out): its decode speed per request
    in front of the most its hardware's memory bandwidth allows at the batch it ran, the share written
    on the bar; the hover says how the ceiling was reckoned."""
    pairs: list[tuple[RunResult, RunCeiling]] = [(r, c) for r in runs if r is not None and (c := run_ceiling(r))]
    fig = go.Figure()
    cats = [wrap(esc(run_label(run, lang)), 22) for run, _ in pairs]
    top = max((max(c.ceiling, c.measured) for _, c in pairs), default=1.0)
    fig.add_bar(
        y=cats, x=[c.ceiling for _, c in pairs], orientation="h", width=0.8,
        marker=dict(color=CEILING_FILL, line=dict(color=MUTED, width=1.5)),
        name=translate(say("ceiling: memory bandwidth"), lang),
        text=[translate(say("ceiling {tok_s} tok/s", tok_s=significant(c.ceiling)), lang) for _, c in pairs],
        textposition="outside", textfont=dict(size=BASE_SIZE - 1, color=MUTED), cliponaxis=False,
        hovertext=[translate(c.why, lang) for _, c in pairs], hoverinfo="text",
    )
    fig.add_bar(
        y=cats, x=[c.measured for _, c in pairs], orientation="h", width=0.42,
        marker_color=run_colors([r for r, _ in pairs]), name=translate(say("measured"), lang),
        text=[f"<b>{significant(c.measured)} tok/s · {c.share:.0%}</b>" for _, c in pairs],
        # inside a bar long enough to hold it, else just past its end (still inside the grey ceiling)
        textposition=["inside" if c.measured >= 0.45 * top else "outside" for _, c in pairs],
        insidetextanchor="end", textfont=dict(size=BASE_SIZE), outsidetextfont=dict(color=INK),
        cliponaxis=False, hoverinfo="skip",
    )
    fig.update_layout(
        barmode="overlay",
        xaxis=dict(title=translate(say("Decode speed per request (tok/s)"), lang), range=[0, top * 1.3],
                   showgrid=True),
        yaxis=dict(autorange="reversed", showgrid=False, tickfont=dict(size=BASE_SIZE)),
        legend=dict(traceorder="reversed"),
    )
    if len(pairs) == 1:
        run, c = pairs[0]
        cap = say("{run} decoded at {share} of its ceiling. Every decode step reads all {weights} GB of weights from "
                  "memory, so the grey bar is the fastest any software could decode on this hardware.",
                  run=run_label(run, lang), share=f"{c.share:.0%}", weights=f"{c.weight_bytes / 1e9:.2f}")
    elif pairs:
        shares = ", ".join(f"{run_label(r, lang)} {c.share:.0%}" for r, c in pairs)
        cap = say("Every decode step reads all the weights from memory, so each grey bar is the fastest any "
                  "software could decode on that hardware; the coloured bars show how close each run came: {shares}.",
                  shares=shares)
    else:
        cap = say("No run here has a ceiling: that needs the model's size and the hardware's memory bandwidth, "
                  "which only newer runs record.")
    placeholder = any(is_placeholder(r) for r, _ in pairs)
    return finish(fig, say("Decode speed against the memory-bandwidth ceiling"), cap, placeholder=placeholder,
                  height=190 + 95 * max(len(pairs), 1), lang=lang)
