"""A concurrency sweep: throughput and latency per level, and its Pareto view with the SLO's knee. Each takes
`lang`."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from engine.digits import significant
from engine.figures.theme import (
    BASE_SIZE,
    FAILED_COLOR,
    INK,
    MUTED,
    PALETTE,
    PURPLE,
    esc,
    finish,
    is_placeholder,
    summary_of,
)
from engine.measure.judge import prefix
from engine.measure.judge import slo as slos
from engine.messages import Message, say, translate
from engine.results.records import RunResult


# -- sweeps -----------------------------------------------------------------------------------------

def _concurrency(run: RunResult) -> float | None:
    """The concurrency limit the run was given, else the most requests it had in flight."""
    v = run.load.concurrency or summary_of(run).max_concurrency
    return float(v) if v else None


def _rate(run: RunResult) -> float | None:
    """The arrival rate a rate sweep's level sent at (requests/s); None for a level of requests in flight."""
    load = run.load
    return float(load.rate) if load.shape == "poisson" and load.rate and not run.extra.sweep_level else None


def by_rate(runs: Sequence[RunResult]) -> bool:
    """Whether a sweep's levels are arrival rates (runs.Runner.rate_sweep) rather than numbers in flight."""
    return bool(runs) and all(_rate(r) is not None for r in runs)


def _label_sides(ys: Sequence[float | None]) -> list[str]:
    """Value labels above each point, on the side the line does not come from: top left where the
    curve rises into the point, top right where it falls into it (the label would sit on the line)."""
    out = []
    for k, y in enumerate(ys):
        prev = ys[k - 1] if k else None
        out.append("top right" if prev is not None and y is not None and prev > y else "top left")
    return out


def sweep_chart(runs: Sequence[RunResult], *, lang: str = "en") -> go.Figure:
    """Output throughput and median TTFT vs concurrency, two panels side by side. Runs are grouped
    into lines by run.extra.series (default: run.scenario)."""
    rated = by_rate(runs)  # a sweep over arrival rates: its x is requests/s
    level = _rate if rated else _concurrency
    groups: dict[str, list[tuple[float, RunResult]]] = {}
    for run in runs:
        c = level(run)
        if c is None:
            continue
        groups.setdefault(run.extra.series or run.scenario, []).append((c, run))
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.13,
                        subplot_titles=(translate(say("Throughput (higher is better)"), lang),
                                        translate(say("Median TTFT (lower is better)"), lang)))
    if rated:
        at_tok_s = translate(say("{x} requests/s: {y} tok/s", x="%{x:g}", y="%{y:,.0f}"), lang)
        at_ms = translate(say("{x} requests/s: {y} ms", x="%{x:g}", y="%{y:,.0f}"), lang)
    else:
        at_tok_s = translate(say("concurrency {x}: {y} tok/s", x="%{x:.0f}", y="%{y:,.0f}"), lang)
        at_ms = translate(say("concurrency {x}: {y} ms", x="%{x:.0f}", y="%{y:,.0f}"), lang)
    allc: list[float] = []
    first_last = None
    for i, (name, pts) in enumerate(groups.items()):
        pts.sort(key=lambda p: p[0])
        cs = [c for c, _ in pts]
        allc += cs
        tp = [summary_of(r).get("output_throughput") for _, r in pts]
        ttft = [summary_of(r).get("median_ttft_ms") for _, r in pts]
        color = PALETTE[i % len(PALETTE)]
        show = len(groups) > 1
        common = dict(mode="lines+markers+text", line=dict(color=color, width=3.5),
                      marker=dict(size=11, color=color),
                      textfont=dict(size=BASE_SIZE - 3, color=color), cliponaxis=False, legendgroup=name)
        shown = esc(translate(name, lang))
        fig.add_scatter(x=cs, y=tp, name=shown, showlegend=show, text=[significant(v) for v in tp],
                        hovertemplate=at_tok_s + "<extra>" + shown + "</extra>",
                        textposition=_label_sides(tp), row=1, col=1, **common)
        fig.add_scatter(x=cs, y=ttft, name=shown, showlegend=False, text=[significant(v) for v in ttft],
                        hovertemplate=at_ms + "<extra>" + shown + "</extra>",
                        textposition=_label_sides(ttft), row=1, col=2, **common)
        if first_last is None and len(pts) >= 2:
            first_last = (cs[0], cs[-1], tp[0], tp[-1], ttft[0], ttft[-1])
    xaxis: dict[str, Any] = dict(
        title_text=translate(say("Arrival rate (requests/s)") if rated else say("Concurrent requests"), lang))
    if allc and min(allc) > 0 and max(allc) / min(allc) >= 8:
        ticks = sorted(set(allc))
        xaxis.update(type="log", tickvals=ticks, ticktext=[f"{c:g}" for c in ticks])
    fig.update_xaxes(**xaxis)
    fig.update_yaxes(title_text=translate(say("Output tokens / s"), lang), rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text=translate(say("Median TTFT (ms)"), lang), rangemode="tozero", row=1, col=2)
    fig.update_annotations(font=dict(size=BASE_SIZE + 1))
    if first_last and None not in first_last:
        c0, c1, t0, t1, f0, f1 = first_last
        said = dict(c0=c0, c1=c1, **{k: significant(v) for k, v in dict(t0=t0, t1=t1, f0=f0, f1=f1).items()})
        # the numbers as measured, the words only where they hold: a wait that fell (a cold first level) was
        # said to grow "past what the server keeps up with" beside a chart drawing it lower
        if rated:
            cap = say("From {c0:g} to {c1:g} requests/s arriving, throughput goes from {t0} to {t1} tok/s and the "
                      "median wait for the first token from {f0} to {f1} ms.", **said)
        elif t1 > t0 and f1 > f0:
            cap = say("From {c0:g} to {c1:g} concurrent requests throughput grows from {t0} to "
                      "{t1} tok/s while the median wait for the first token goes from {f0} to "
                      "{f1} ms: more users per GPU, each waiting a little longer.", **said)
        else:
            cap = say("From {c0:g} to {c1:g} concurrent requests, throughput goes from {t0} to {t1} tok/s and the "
                      "median wait for the first token from {f0} to {f1} ms.", **said)
    elif rated:
        cap = say("Throughput and median time to first token for each arrival rate.")
    else:
        cap = say("Throughput and median time to first token for each concurrency level.")
    caps = [cap]
    if cached := prefix.levels_said([r for group in groups.values() for _c, r in group]):
        caps.append(cached)
    return finish(fig, say("Rate sweep") if rated else say("Concurrency sweep"), caps, height=520, lang=lang)


def pareto_chart(runs: Sequence[RunResult], slo: slos.Slo = slos.DEFAULT_SLO, *, lang: str = "en",
                 search_best: RunResult | None = None, search_slo: slos.Slo | None = None) -> go.Figure:
    """A concurrency sweep as `vllm bench sweep plot_pareto` draws it: output tok/s per user (x: the total
    shared by the requests in flight) against output tok/s in total (y), one point per level numbered by
    its requests in flight. A level where at least 90 % of requests met `slo` (engine.measure.judge.slo) is
    filled, one where fewer did hollow, one with no requests to judge grey; the knee, the most requests
    in flight that still met it, is ringed. Lines by run.extra.series, as in sweep_chart.

    `search_best`: the run at an SLO search's answer (engine.runs.search.SloSearch.best_run), judged by the
    search's own `search_slo` (default `slo`), drawn as a star at its own point (it need not be a sweep level)
    with its label and the caption's sentence from that one point."""
    groups: dict[str, list[RunResult]] = {}
    for run in runs:
        groups.setdefault(run.extra.series or run.scenario, []).append(run)
    fig = go.Figure()
    show = len(groups) > 1
    hover_meets = translate(say("{users} in flight: {total} tok/s in total, {per_user} tok/s per user; {share} of "
                                "requests met the SLO", users="%{text}", total="%{y:,.0f}", per_user="%{x:,.1f}",
                                share="%{customdata}"), lang)
    hover_unjudged = translate(say("{users} in flight: {total} tok/s in total, {per_user} tok/s per user",
                                   users="%{text}", total="%{y:,.0f}", per_user="%{x:,.1f}"), lang)
    caps, knees = [], []
    # the search's answer, first: a knee's label makes room for its star, or says it when they name one level
    searched = slos.levels([search_best], search_slo or slo) if search_best is not None else []
    star_at = searched[0] if searched else None
    star_text = (translate(say("SLO search: {users:g} in flight", users=star_at.users), lang)
                 if star_at is not None else "")
    star_said = False
    for i, (name, group) in enumerate(groups.items()):
        pts = slos.levels(group, slo)
        if not pts:
            continue
        color = PALETTE[i % len(PALETTE)]
        fill = [FAILED_COLOR if p.verdict is None else color if p.verdict.meets else "white" for p in pts]
        shown = esc(translate(name, lang))
        found = slos.find_knee(pts, slo)  # the mark and the caption from one finding
        k = found.level
        fig.add_scatter(  # the marked level's number set off to clear its ring
            x=[p.per_user for p in pts], y=[p.total for p in pts],
            text=[("\u2003" if p is k else "") + f"{p.users:g}" for p in pts],
            customdata=["–" if p.verdict is None or p.verdict.attainment is None else
                        f"{slos.whole_percent(p.verdict.attainment):.0%}" for p in pts],
            mode="lines+markers+text", textposition="middle right", name=shown, showlegend=show,
            line=dict(color=color, width=3), marker=dict(size=16, color=fill, line=dict(color=color, width=3)),
            textfont=dict(size=BASE_SIZE - 2, color=color), cliponaxis=False,
            hovertemplate=(hover_meets if any(p.verdict for p in pts) else hover_unjudged)
            + "<extra>" + shown + "</extra>")
        if k is not None:
            knees.append((k, found.reached))
            text = translate(found.mark, lang)
            if star_at is not None and star_at.users == k.users and not star_said:  # one label for one level
                text, star_said = f"{text}<br>{star_text}", True
            # named below left, off the curve (which rises to the left), unless it is the lowest point or the
            # star lies there
            below = k is not pts[0] and not (star_at is not None and star_at.total < k.total)
            fig.add_annotation(x=k.per_user, y=k.total, showarrow=True, arrowhead=2, arrowwidth=2,
                               ax=-90, ay=60 if below else -60, text=text,
                               font=dict(size=BASE_SIZE, color=INK), bgcolor="rgba(255,255,255,0.85)")
        caps.append(say("{series}: {sentence}", series=name, sentence=found.said) if show else found.said)
    # what filled and hollow mean, in the legend
    for label, face in ((say("at least {target:.0%} met the SLO", target=slos.ATTAINMENT), MUTED),
                        (say("fewer met it"), "white")):
        fig.add_scatter(x=[None], y=[None], mode="markers", name=translate(label, lang), hoverinfo="skip",
                        marker=dict(size=16, color=face, line=dict(color=MUTED, width=3)))
    for reached, name in ((True, say("knee")), (False, say("most in flight that met the SLO"))):
        ringed = [level for level, was in knees if was is reached]
        if ringed:
            fig.add_scatter(x=[k.per_user for k in ringed], y=[k.total for k in ringed], mode="markers",
                            hoverinfo="skip", name=translate(name, lang),
                            marker=dict(symbol="circle-open" if reached else "circle-open-dot", size=34, color=INK,
                                        line=dict(width=3, dash=None)))
    star: list[Message] = []
    if star_at is not None:
        p = star_at  # the star, its label and its sentence from this one point
        fig.add_scatter(x=[p.per_user], y=[p.total], mode="markers", name=translate(say("SLO search's answer"), lang),
                        customdata=[p.users], hoverinfo="skip", meta="slo-search",
                        marker=dict(symbol="star", size=26, color=PURPLE, line=dict(color=INK, width=2)))
        if not star_said:  # below left: the curve rises to the left, so nothing is drawn there
            fig.add_annotation(x=p.per_user, y=p.total, showarrow=True, arrowhead=2, arrowwidth=2, ax=-110, ay=70,
                               text=star_text, font=dict(size=BASE_SIZE, color=INK), bgcolor="rgba(255,255,255,0.85)")
        star = [say("The star is the SLO search's answer under its SLO ({slo}): {users:g} requests in flight, "
                    "{total} tok/s in total, {per_user} tok/s per user.", slo=(search_slo or slo).said,
                    users=p.users, total=significant(p.total), per_user=significant(p.per_user))]
    fig.update_layout(showlegend=bool(caps or star),
                      xaxis=dict(title=translate(say("Output tokens / s per user"), lang), rangemode="tozero"),
                      yaxis=dict(title=translate(say("Output tokens / s in total"), lang), rangemode="tozero"))
    if caps:
        cap = [say("Each point is a sweep level, numbered by its requests in flight: further right each user's text "
                   "streams faster, higher up the server makes more in total."), *caps, *star]
    else:
        cap = star or [say("No sweep levels to show yet.")]
    return finish(fig, say("Per-user against total throughput"), cap,
                  placeholder=any(is_placeholder(r) for r in runs), height=560, lang=lang)
