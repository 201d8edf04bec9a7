"""Where a request's time went as the server saw it, against the client's TTFT and E2E; and a run's energy line.
See docs/measuring.md#server-time and docs/measuring.md#energy."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go

from engine.digits import significant
from engine.figures.theme import (BASE_SIZE, BLUE, GREEN, INK, MUTED, ORANGE, SKY, VERMILLION, esc, finish,
                                  is_placeholder, rgba, run_label, summary_of)
from engine.measure.judge import server_time
from engine.measure.judge.server_time import GAP, PHASES, ServerTime
from engine.messages import mark, say, translate
from engine.observe import energy

PHASE_COLORS = {"queue": ORANGE, "prefill": VERMILLION, "decode": BLUE}
GAP_COLOR = "#8c8c8c"
FRONT = mark("inside vLLM, outside its engine's steps")
OUTSIDE = mark("outside the server: HTTP, streaming, the client")
CLIENT_TTFT = mark("client: time to first token")
CLIENT_REST = mark("client: first token to last")


def _runs(runs: Any) -> list:
    return list(runs) if isinstance(runs, Sequence) and not isinstance(runs, str) else [runs]


def _percentiles(run: Any, key: str, lang: str) -> str:
    """The hover's line of bucket-estimated percentiles of one of the server's histograms, bounds marked ('' when
    none)."""
    h = run.extra.server_view.histograms.get(key) if run.extra.server_view else None
    if h is None or h.p50 is None:
        return ""
    return "<br>" + translate(server_time.percentiles_said(h), lang)


def _ms(s: float | None) -> str:
    return significant(None if s is None else s * 1000)


def segments(t: ServerTime) -> list[tuple[str, Any, float]]:
    """The server's bar, in order: (key, its name, seconds). Its phases, then the gap to the client's E2E: split
    into inside vLLM and outside the server where vLLM timed its whole request too, else named as one."""
    out = [(key, PHASES[key], v) for key in ("queue", "prefill", "decode") if (v := getattr(t, key)) is not None]
    if t.front is not None and t.outside is not None:
        out += [("front", FRONT, t.front), ("outside", OUTSIDE, t.outside)]
    elif t.gap is not None:
        out.append(("gap", GAP, max(0.0, t.gap)))
    return out


def server_view_chart(runs: Any, *, lang: str = "en", names: list[str] | None = None) -> go.Figure | str:
    """Per run two horizontal bars, in ms: vLLM's mean queue / prefill / decode per request stacked with the gap
    to the client's E2E, and the client's mean TTFT and E2E. `runs`: one run or several (a sweep's levels), named
    by their labels or by `names` (one per run: what the page calls them).
    Without a server view on any of them: the sentence that says so (str), not an empty chart."""
    runs = _runs(runs)
    drawn = [(r, t) for r in runs if (t := server_time.of(r)) is not None]
    if not drawn:
        return translate(_none_said(runs[0]), lang) if runs else translate(say("There is no run to draw."), lang)
    several = len(drawn) > 1
    rows: list[str] = []
    fig = go.Figure()
    shown: set[str] = set()

    def bar(y: str, key: str, name: Any, seconds: float, color: str, hover: str, pattern: str = "") -> None:
        label = translate(name, lang)
        fig.add_bar(y=[y], x=[seconds * 1000], orientation="h", name=label, legendgroup=key,
                    showlegend=key not in shown, marker=dict(color=color, pattern=dict(shape=pattern) if pattern
                                                             else None, line=dict(color="white", width=1)),
                    text=[_ms(seconds)], textposition="inside", insidetextanchor="middle", textangle=0,
                    textfont=dict(size=BASE_SIZE - 2, color="white" if key in PHASE_COLORS else INK),
                    hovertext=[f"<b>{esc(label)}</b><br>{_ms(seconds)} ms" + hover], hoverinfo="text")
        shown.add(key)

    named = dict(zip(map(id, runs), names or ()))
    names = [esc(named.get(id(run)) or run_label(run, lang)) for run, _ in drawn]
    for i, (run, t) in enumerate(drawn):
        # two runs of one label (repeats) get rows of their own, not one stacked on the other
        name = names[i] if names.count(names[i]) == 1 else f"{names[i]} #{names[:i + 1].count(names[i])}"
        server_row = translate(say("{run} · vLLM", run=name) if several else say("vLLM (its /metrics)"), lang)
        client_row = translate(say("{run} · client", run=name) if several else say("the client"), lang)
        rows += [server_row, client_row]
        for key, phase, seconds in segments(t):
            exact = "<br>" + translate(say("mean per request (exact)"), lang)
            if key in PHASE_COLORS:
                bar(server_row, key, phase, seconds, PHASE_COLORS[key], exact + _percentiles(run, key, lang))
            else:
                bar(server_row, key, phase, seconds, rgba(GAP_COLOR, 0.55 if key == "outside" else 0.35),
                    exact, pattern="/" if key in ("outside", "gap") else "")
        if t.client_ttft is not None:
            bar(client_row, "client_ttft", CLIENT_TTFT, t.client_ttft, rgba(GREEN, 0.8),
                "<br>" + translate(say("the client's mean, from its own clock"), lang))
        if t.client_e2e is not None and t.client_ttft is not None:
            bar(client_row, "client_rest", CLIENT_REST, max(0.0, t.client_e2e - t.client_ttft), rgba(SKY, 0.8),
                "<br>" + translate(say("E2E {e2e} ms in all", e2e=_ms(t.client_e2e)), lang))
    top = max((t.client_e2e or t.served or 0.0 for _, t in drawn), default=0.0) * 1000
    for i, (_run, t) in enumerate(drawn):  # the client's E2E at the end of its bar: what both bars add up to
        if t.client_e2e is not None:
            fig.add_annotation(x=t.client_e2e * 1000, y=rows[2 * i + 1], xanchor="left",
                               text=translate(say("E2E {e2e} ms", e2e=_ms(t.client_e2e)), lang), showarrow=False,
                               xshift=6, font=dict(size=BASE_SIZE - 2, color=MUTED))
    fig.update_layout(
        barmode="stack", bargap=0.35, showlegend=True, uniformtext=dict(minsize=BASE_SIZE - 6, mode="hide"),
        xaxis=dict(title=translate(say("Time per request, mean (ms)"), lang), showgrid=True,
                   range=[0, top * 1.22 or 1]),
        yaxis=dict(showgrid=False, autorange="reversed", type="category", categoryorder="array", categoryarray=rows),
        legend=dict(traceorder="normal"))
    fig = finish(fig, say("Where a request's time went: the server's view and the client's"), _caption(drawn, named),
                 placeholder=any(is_placeholder(r) for r, _ in drawn), height=360 + 110 * len(drawn), lang=lang)
    return fig.update_layout(margin=dict(t=fig.layout.margin.t + 60))  # seven legend entries: three rows


def _none_said(run: Any) -> Any:
    """Why a run has no server view. A run this app measured since it reads /metrics around each run also holds
    its energy or why it has none: its server published no histograms (judge.server_time's sentence). One that
    holds neither may be older than that reading, so the sentence says both."""
    n = run.extra
    if n.server_view is None and n.energy.reading is None and not n.energy.missing:
        return say("This run holds no histograms of the server's: its server published none on /metrics, or the run "
                   "was saved before this app read them. Where the time went inside the server is not known.")
    return server_time.said(run)[0]  # with no view, its one sentence


def _caption(drawn: list, named: dict | None = None) -> list:
    """One run: judge.server_time's sentences, the bars' very numbers. Several: which ones waited mostly in the
    queue, then how the means and percentiles were made."""
    if len(drawn) == 1:
        return server_time.said(drawn[0][0])
    out = [say("Each run's mean time per request as vLLM timed it (upper bar) against the client's TTFT and E2E "
               "(lower bar); the hatched part is what the server does not time.")]
    named = named or {}
    out += [say("{run}: most of the TTFT ({share:.0%}) was waiting for a slot: raise --max-num-seqs or add KV "
                "cache.", run=named.get(id(r)) or r.label or r.scenario, share=t.queue_share)
            for r, t in drawn if t.queue_dominates]
    out.append(server_time.MEANS)
    if any(server_time.bounded(r) for r, _ in drawn):
        out.append(server_time.BOUNDS)
    return out


# -- energy ---------------------------------------------------------------------------------------------------------

def _output_tokens(run: Any) -> int | None:
    return summary_of(run).get("total_output_tokens")


def j_per_token(run: Any) -> float | None:
    """The run's joules per output token (a RunResult or a history row); None without an energy reading."""
    u = energy.use(run.extra.energy.reading, _output_tokens(run))
    return None if u is None else u.j_per_token


def energy_line(run: Any, *, lang: str = "en") -> str | None:
    """The run's energy in one line: what its measured part used by which method, per output token and per joule
    (its cost is energy_cost_line's), the power before it; or why there is no reading; None for a run that
    recorded neither (saved before energy was read, or the naive baseline)."""
    u = energy.use(run.extra.energy.reading, _output_tokens(run))
    if u is not None:
        return " ".join(translate(m, lang) for m in energy.said(u))
    if why := run.extra.energy.missing:
        return translate(energy.missing_said(why), lang)
    return None


def energy_cost_line(run: Any, price_per_kwh: float | None, *, lang: str = "en") -> str | None:
    """What the run's measured energy cost at this viewer's price per kWh; None without a price or a reading."""
    if price_per_kwh is None:
        return None
    u = energy.use(run.extra.energy.reading, _output_tokens(run), price_per_kwh)
    said = energy.cost_said(u) if u is not None else None
    return translate(said, lang) if said is not None else None
