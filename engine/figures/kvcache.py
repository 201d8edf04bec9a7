"""The KV cache compared across server configurations: capacity against need, preemptions, the queue, TTFT.
See docs/measuring.md#kv-cache."""
from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from engine.figures.theme import BASE_SIZE, MUTED, ORANGE, PURPLE, VERMILLION, esc, finish, run_colors, run_label, wrap
from engine.measure.judge import kvcache
from engine.messages import say, seconds, translate
from engine.results.records import RunResult


def kv_compare(runs: Sequence[RunResult], *, lang: str = "en") -> go.Figure:
    """Three panels, one group of bars per configuration: KV tokens (capacity vs needed at once),
    preemptions and the most requests waiting, median TTFT. The caption says, per configuration, what
    its flags did (kvcache.said), after the one thing to notice."""
    runs = list(runs)
    rows = [kvcache.row(r) for r in runs]
    cats = [wrap(esc(run_label(r, lang)), 10) for r in runs]  # three panels side by side: narrow categories
    fig = make_subplots(rows=1, cols=3, horizontal_spacing=0.09,
                        subplot_titles=[translate(t, lang) for t in (say("KV cache (tokens)"),
                                                                     say("Preempted and waiting"),
                                                                     say("Median TTFT (s)"))])

    def bars(key: str, name, color: str, col: int, fmt: str) -> None:
        ys = [row[key] for row in rows]
        fig.add_bar(x=cats, y=ys, name=translate(name, lang), marker_color=color, row=1, col=col,
                    text=["" if v is None else fmt.format(v) for v in ys], textposition="outside", cliponaxis=False,
                    hovertemplate="%{y:,}<extra>" + esc(translate(name, lang)) + "</extra>")

    bars("capacity_tokens", say("capacity"), PURPLE, 1, "{:,.0f}")
    bars("need_tokens", say("needed at once"), MUTED, 1, "{:,.0f}")
    bars("preemptions", say("preemptions"), VERMILLION, 2, "{:,.0f}")
    bars("peak_waiting", say("most waiting"), ORANGE, 2, "{:,.0f}")
    ttft = [None if row["median_ttft_ms"] is None else row["median_ttft_ms"] / 1000 for row in rows]
    fig.add_bar(x=cats, y=ttft, marker_color=run_colors(runs), showlegend=False, row=1, col=3,
                text=["" if v is None else seconds(v, lang) for v in ttft], textposition="outside", cliponaxis=False,
                hovertemplate=seconds("%{y:.2f}", lang) + "<extra></extra>")
    # the capacity can be 100x what was needed: a log axis keeps both bars readable
    fig.update_yaxes(type="log", dtick=1, tickformat=",d", row=1, col=1)  # 100, 1,000, 10,000: no "10k" beside "1000"
    for col, vals in ((2, [v for row in rows for v in (row["preemptions"], row["peak_waiting"])]), (3, ttft)):
        top = max((v for v in vals if v is not None), default=0) or 1
        fig.update_yaxes(range=[0, top * 1.25], row=1, col=col)
    fig.update_xaxes(tickfont=dict(size=BASE_SIZE - 4), type="category", tickangle=0)
    fig.update_layout(barmode="group", bargap=0.3, legend=dict(orientation="h", x=0, y=-0.32, yanchor="top"),
                      margin=dict(b=150))
    sentences = [s for s in (kvcache.said(r) for r in runs) if s]
    cap = [say("Where the answers need more tokens than the cache holds, requests wait for room and are "
               "preempted, and the first token comes later.")] + sentences
    return finish(fig, say("The KV cache per configuration"), cap, height=560, lang=lang)
