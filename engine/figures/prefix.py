"""Prefix caching on against off: each request's time to first token above the prompt tokens the cache served.
See docs/measuring.md#prefix-caching."""
from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from engine.figures.theme import BASE_SIZE, BLUE, GREEN, MUTED, PALETTE, VERMILLION, esc, finish, run_label, short
from engine.measure.judge import prefix
from engine.messages import say, translate
from engine.results.records import RequestRecord, RunResult


def _color(run: RunResult, i: int) -> str:
    on = prefix.caching_on(run)
    return GREEN if on is True else VERMILLION if on is False else (BLUE if i == 0 else PALETTE[i % len(PALETTE)])


def _ttft_ms(recs: Sequence[RequestRecord]) -> list[float]:
    """Each request's TTFT in ms (every one of prefix.ok_in_order has one)."""
    return [t * 1000 for r in recs if (t := r.ttft) is not None]


def prefix_cache_compare(runs: Sequence[RunResult], *, lang: str = "en") -> go.Figure:
    """Two panels on one request axis: TTFT per request (ms) for each run, and the prompt tokens each
    request took from the prefix cache; each run's server hit rate in its legend entry."""
    runs = list(runs)
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.14, row_heights=[0.62, 0.38],
                        subplot_titles=("", translate(say("Prompt tokens served from the prefix cache"), lang)))
    reported, top = False, 0.0
    for i, run in enumerate(runs):
        recs = prefix.ok_in_order(run)
        xs = list(range(1, len(recs) + 1))
        name = esc(run_label(run, lang))
        if (rate := prefix.hit_rate(run)) is not None:
            name = translate(say("{run} · server hit rate {rate:.0%}", run=name, rate=rate), lang)
        color = _color(run, i)
        ttft = _ttft_ms(recs)
        top = max([top, *ttft])
        hover = [f"<b>{name}</b><br>{esc(short(r.prompt, 60))}<br>TTFT {ms:,.0f} ms" for r, ms in zip(recs, ttft)]
        fig.add_scatter(x=xs, y=ttft, mode="lines+markers", name=name, legendgroup=name,
                        line=dict(color=color, width=3), marker=dict(size=11, color=color),
                        hovertext=hover, hoverinfo="text", row=1, col=1)
        cached = [r.cached_tokens for r in recs]
        if any(c is not None for c in cached):
            reported = True
            fig.add_bar(x=xs, y=[c or 0 for c in cached], name=name, legendgroup=name, showlegend=False,
                        marker_color=color, text=[f"{c:,}" if c is not None else "–" for c in cached],
                        textposition="outside", cliponaxis=False, textfont=dict(size=BASE_SIZE - 4),
                        hovertemplate="%{y:,} " + translate(say("cached prompt tokens"), lang) + "<extra></extra>",
                        row=2, col=1)
    first = next((run for run in runs if prefix.caching_on(run) is True and prefix.ok_in_order(run)), None)
    if first is not None:
        fig.add_annotation(x=1, y=_ttft_ms(prefix.ok_in_order(first))[0],
                           text=translate(say("first request: fills the cache"), lang), showarrow=True, arrowhead=2,
                           ax=60, ay=-30, xanchor="left", font=dict(size=BASE_SIZE - 2, color=MUTED), row=1, col=1)
    if runs and not reported:
        fig.add_annotation(text=translate(say("The server did not report cached tokens: it says them when started "
                                              "with --enable-prompt-tokens-details."), lang),
                           xref="x2 domain", yref="y2 domain", x=0.5, y=0.5, showarrow=False,
                           font=dict(size=BASE_SIZE - 2, color=MUTED))
    fig.update_xaxes(title_text=translate(say("Request, in the order sent"), lang), dtick=1, row=2, col=1)
    fig.update_yaxes(title_text=translate(say("TTFT (ms), lower is better"), lang), range=[0, top * 1.3 or 1],
                     row=1, col=1)
    fig.update_yaxes(title_text=translate(say("tokens"), lang), rangemode="tozero", row=2, col=1)
    fig.update_annotations(selector=dict(showarrow=False, yref="paper"), font=dict(size=BASE_SIZE + 1))
    fig.update_layout(barmode="group", bargap=0.3)
    both = prefix.pair(runs)
    if both:
        cap = prefix.sentence(*both)
    elif runs:
        cap = say("Run the comparison with prefix caching both on and off to see what the cache saves.")
    else:
        cap = say("No runs to compare yet.")
    return finish(fig, say("Prefix caching: one long shared system prompt, on vs off"), cap, height=680, lang=lang)
