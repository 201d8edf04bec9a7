"""Charts that compare runs: naive vs vLLM latency per request, tuning configs side by side, a
concurrency sweep (and its Pareto view with the SLO's knee), and any summary metric across saved runs
(named by the catalogue in engine.metrics). Each takes `lang`, the language its text is said in
(English by default).
See docs/architecture.md.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from engine.figures.theme import (
    BASE_SIZE,
    BLUE,
    DASHES,
    FAILED_COLOR,
    INK,
    KIND_COLORS,
    MUTED,
    PALETTE,
    VERMILLION,
    esc,
    finish,
    is_placeholder,
    rgba,
    measured,
    run_colors,
    run_label,
    short,
    summary_of,
    why_failed,
    wrap,
)
from engine.measure import slo as slos
from engine.measure import stats
from engine.messages import say, translate
from engine.metrics import metric_info
from engine.results.records import RunResult


def _fmt_num(v: float) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    a = abs(v)
    if a >= 1000:
        return f"{v:,.0f}"
    if a >= 10:
        return f"{v:.0f}"
    if a >= 1:
        return f"{v:.1f}"
    return f"{v:.2f}"


def _speedup_phrase(slow: float, fast: float, who: str = "vLLM") -> str:
    if not slow or not fast:
        return ""
    s = slow / fast
    if abs(s - 1) < 0.05:
        return say("{who} about as fast", who=who)
    return say("{who} {x:.1f}× faster", who=who, x=s) if s > 1 else say("{who} {x:.1f}× slower", who=who, x=1 / s)


def _when(t: float, lang: str) -> str:
    """A run's start under its label: "Nov 30 10:53" in English, the date as `lang` writes it otherwise."""
    d = datetime.fromtimestamp(t)
    if lang == "en":
        return d.strftime("%b %d %H:%M")
    from babel.core import UnknownLocaleError  # only for another language (the CLI and the docs draw English)
    from babel.dates import format_skeleton

    try:
        return f"{format_skeleton('MMMd', d, locale=lang)} {d:%H:%M}"
    except (UnknownLocaleError, KeyError, ValueError):  # a language babel does not know
        return d.strftime("%b %d %H:%M")


def _color(run: Any, i: int) -> str:
    return KIND_COLORS.get(getattr(run, "kind", ""), PALETTE[i % len(PALETTE)])


# -- step 1-2: naive vs vLLM per request ------------------------------------------------------------

def latency_bars(naive_run: RunResult | None, vllm_run: RunResult | None,
                 extra_runs: Iterable[RunResult] = (), *, lang: str = "en") -> go.Figure:
    """Grouped per-request latency bars: naive vs vLLM (+ e.g. static batching); averages in the
    legend, the speed-up in the title. Either of the two main runs may be None."""
    runs = [r for r in (naive_run, vllm_run, *extra_runs) if r is not None]
    fig = go.Figure()
    indices = sorted({r.index for run in runs for r in run.measured})
    xcat = {idx: f"#{k + 1}" for k, idx in enumerate(indices)}
    n_bars = sum(len(run.measured) for run in runs)
    avgs: dict[str, float] = {}
    placeholder = any(is_placeholder(r) for r in runs)
    colors = run_colors(runs)
    failed = translate(say("failed"), lang)
    for i, run in enumerate(runs):
        recs = measured(run)
        lat = [r.e2e if r.ok else None for r in recs]
        ok = [v for v in lat if v is not None]
        avg = sum(ok) / len(ok) if ok else float("nan")
        avgs[run.kind if run in (naive_run, vllm_run) else run.id] = avg
        label = esc(run_label(run, lang))
        hover = [
            f"<b>{label}</b><br>{esc(short(r.prompt, 60))}<br>"
            + (translate(say("latency {latency:.2f} s · {tokens} tokens · {rate:.0f} tok/s", latency=r.e2e,
                             tokens=r.output_tokens, rate=r.output_tokens / r.e2e) if r.e2e else
                         say("latency {latency:.2f} s · {tokens} tokens", latency=r.e2e, tokens=r.output_tokens),
                         lang)
               if r.ok else f"{failed}<br>{why_failed(r, lang)}")
            for r in recs
        ]
        fig.add_bar(
            x=[xcat[r.index] for r in recs], y=[v if v is not None else 0 for v in lat],
            name=translate(say("{run} (all failed)", run=label) if math.isnan(avg) else
                           say("{run} (avg {avg:.1f} s)", run=label, avg=avg), lang),
            marker_color=colors[i],
            text=[f"{v:.1f}" if v is not None else failed for v in lat] if n_bars <= 30 else None,
            textposition="outside", textfont=dict(size=BASE_SIZE - 2),
            hovertext=hover, hoverinfo="text", cliponaxis=False,
        )
    fig.update_layout(barmode="group", xaxis_title=translate(say("Request"), lang),
                      yaxis=dict(title=translate(say("Latency (s)"), lang), rangemode="tozero"),
                      xaxis=dict(type="category", categoryorder="array",
                                 categoryarray=[xcat[i] for i in indices]))
    na = avgs.get("naive") if naive_run is not None else None
    va = avgs.get("vllm") if vllm_run is not None else None
    if na and va and not (math.isnan(na) or math.isnan(va)):
        title = say("Latency per request: {speedup}", speedup=_speedup_phrase(na, va))
        cap = say("Each group of bars is the same prompt: vLLM answers in {vllm:.1f} s on average, the "
                  "naive transformers loop in {naive:.1f} s, a {speedup:.1f}× speed-up from the engine "
                  "alone, before any batching.", vllm=va, naive=na, speedup=na / va)
    else:
        title = say("Latency per request")
        said = []
        for run, avg in zip(runs, avgs.values()):
            who = run_label(run, lang)
            said.append(translate(say("{run} failed on every request (hover a 'failed' label for why)", run=who)
                                  if math.isnan(avg) else say("{run} averages {avg:.1f} s", run=who, avg=avg), lang))
        cap = say("Each bar is one request; {runs}.", runs="; ".join(said)) if runs else say("No runs to show yet.")
    return finish(fig, title, cap, placeholder=placeholder, height=520, lang=lang)


# -- step 4: tuning ---------------------------------------------------------------------------------

def _kv_label(run: RunResult) -> str:
    kv = run.extra.kv_cache_tokens
    if not kv:
        return ""
    if kv < 1e3:  # a squeezed cache (engine.measure.kvcache): its tokens, not "0 k"
        return say("KV cache {tokens:,} tok", tokens=kv)
    return say("KV cache {m:.2f} M tok", m=kv / 1e6) if kv >= 1e6 else say("KV cache {k:.0f} k tok", k=kv / 1e3)


def tuning_compare(runs: Sequence[RunResult], *, lang: str = "en") -> go.Figure:
    """Two panels side by side: output throughput (tok/s) and wall time per config, values on the
    bars, KV-cache capacity under each label when known."""
    runs = list(runs)
    differ_keys = [k for k in ("max_tokens", "concurrency", "rate")
                   if len({str(getattr(r.load, k)) for r in runs}) > 1]
    cats = []
    for run in runs:
        lab = wrap(esc(run_label(run, lang)), 20)
        notes = [translate(_kv_label(run), lang)] + [f"{k} {getattr(run.load, k)}" for k in differ_keys
                                     if getattr(run.load, k) is not None]
        notes = [x for x in notes if x]
        if notes:
            lab += "".join(f"<br><span style='font-size:{BASE_SIZE - 3}px;color:{MUTED}'>{x}</span>" for x in notes)
        cats.append(lab)
    tput = []
    for run in runs:
        s = summary_of(run)
        v = s.get("output_throughput")
        if v is None:
            v = sum(r.output_tokens for r in run.measured if r.ok) / run.duration if run.duration else 0.0
        tput.append(v)
    wall = [float(run.duration) for run in runs]
    colors = run_colors(runs)
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.12,
                        subplot_titles=(translate(say("Throughput (higher is better)"), lang),
                                        translate(say("Wall time (lower is better)"), lang)))
    fig.add_bar(x=cats, y=tput, marker_color=colors, text=[f"<b>{v:,.0f}</b>" for v in tput],
                textposition="outside", cliponaxis=False, showlegend=False, name=translate(say("throughput"), lang),
                hovertemplate="%{y:,.0f} tok/s<extra></extra>", row=1, col=1)
    fig.add_bar(x=cats, y=wall, marker_color=colors, text=[f"<b>{v:.1f} s</b>" for v in wall],
                textposition="outside", cliponaxis=False, showlegend=False, name=translate(say("wall time"), lang),
                hovertemplate="%{y:.2f} s<extra></extra>", row=1, col=2)
    fig.update_yaxes(title_text=translate(say("Output tokens / s"), lang), range=[0, max(tput or [1]) * 1.2 or 1],
                     row=1, col=1)
    fig.update_yaxes(title_text=translate(say("Wall time (s)"), lang), range=[0, max(wall or [1]) * 1.2 or 1],
                     row=1, col=2)
    fig.update_xaxes(tickfont=dict(size=BASE_SIZE - 2), type="category")
    fig.update_annotations(font=dict(size=BASE_SIZE + 1))
    fig.update_layout(bargap=0.35)
    if len(runs) >= 2 and tput[0]:
        parts = [f"{run_label(r, lang)} {(v / tput[0] - 1) * 100:+.0f}%" for r, v in zip(runs[1:], tput[1:])]
        cap = [say("Throughput compared with {run}: {changes}.", run=run_label(runs[0], lang),
                   changes=", ".join(parts))]
    elif runs:
        cap = [say("{run}: {tput:,.0f} tok/s, {wall:.1f} s wall time.", run=run_label(runs[0], lang), tput=tput[0],
                   wall=wall[0])]
    else:
        cap = [say("No runs to compare yet.")]
    differ = []
    for key in ("max_tokens", "concurrency"):  # setting names: data, not words
        vals = {str(getattr(r.load, key)) for r in runs if getattr(r.load, key) is not None}
        if len(vals) > 1:
            differ.append(f"{key} ({' vs '.join(sorted(vals))})")
    nreq = {len(r.measured) for r in runs}
    if len(nreq) > 1:
        differ.append(translate(say("request count ({counts})", counts=" vs ".join(map(str, sorted(nreq)))), lang))
    if differ:
        cap.append(say("Careful: the runs also differ in {what}, not only in the server config.",
                       what=", ".join(differ)))
    return finish(fig, say("Tuning: throughput and wall time per config"), cap, height=540, lang=lang)


# -- sweeps -----------------------------------------------------------------------------------------

def _concurrency(run: RunResult) -> float | None:
    """The concurrency limit the run was given, else the most requests it had in flight."""
    v = run.load.concurrency or summary_of(run).max_concurrency
    return float(v) if v else None


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
    groups: dict[str, list[tuple[float, RunResult]]] = {}
    for run in runs:
        c = _concurrency(run)
        if c is None:
            continue
        groups.setdefault(run.extra.series or run.scenario, []).append((c, run))
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.13,
                        subplot_titles=(translate(say("Throughput (higher is better)"), lang),
                                        translate(say("Median TTFT (lower is better)"), lang)))
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
        fig.add_scatter(x=cs, y=tp, name=shown, showlegend=show, text=[_fmt_num(v) for v in tp],
                        hovertemplate=at_tok_s + "<extra>" + shown + "</extra>",
                        textposition=_label_sides(tp), row=1, col=1, **common)
        fig.add_scatter(x=cs, y=ttft, name=shown, showlegend=False, text=[_fmt_num(v) for v in ttft],
                        hovertemplate=at_ms + "<extra>" + shown + "</extra>",
                        textposition=_label_sides(ttft), row=1, col=2, **common)
        if first_last is None and len(pts) >= 2:
            first_last = (cs[0], cs[-1], tp[0], tp[-1], ttft[0], ttft[-1])
    xaxis = dict(title_text=translate(say("Concurrent requests"), lang))
    if allc and min(allc) > 0 and max(allc) / min(allc) >= 8:
        ticks = sorted(set(allc))
        xaxis.update(type="log", tickvals=ticks, ticktext=[f"{c:g}" for c in ticks])
    fig.update_xaxes(**xaxis)
    fig.update_yaxes(title_text=translate(say("Output tokens / s"), lang), rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text=translate(say("Median TTFT (ms)"), lang), rangemode="tozero", row=1, col=2)
    fig.update_annotations(font=dict(size=BASE_SIZE + 1))
    if first_last and None not in first_last:
        c0, c1, t0, t1, f0, f1 = first_last
        cap = say("From {c0:g} to {c1:g} concurrent requests throughput grows from {t0:,.0f} to "
                  "{t1:,.0f} tok/s while the median wait for the first token goes from {f0:,.0f} to "
                  "{f1:,.0f} ms: more users per GPU, each waiting a little longer.",
                  c0=c0, c1=c1, t0=t0, t1=t1, f0=f0, f1=f1)
    else:
        cap = say("Throughput and median time to first token for each concurrency level.")
    return finish(fig, say("Concurrency sweep"), cap, height=520, lang=lang)


def pareto_chart(runs: Sequence[RunResult], slo: slos.Slo = slos.DEFAULT_SLO, *, lang: str = "en") -> go.Figure:
    """A concurrency sweep as `vllm bench sweep plot_pareto` draws it: output tok/s per user (x: the total
    shared by the requests in flight) against output tok/s in total (y), one point per level numbered by
    its requests in flight. A level where at least 90 % of requests met `slo` (engine.measure.slo) is
    filled, one where fewer did hollow, one with no requests to judge grey; the knee, the most requests
    in flight that still met it, is ringed. Lines by run.extra.series, as in sweep_chart."""
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
    for i, (name, group) in enumerate(groups.items()):
        pts = slos.levels(group, slo)
        if not pts:
            continue
        color = PALETTE[i % len(PALETTE)]
        fill = [FAILED_COLOR if p.verdict is None else color if p.verdict.meets else "white" for p in pts]
        shown = esc(translate(name, lang))
        k = slos.knee(pts)
        fig.add_scatter(  # the knee's number set off to clear its ring
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
            knees.append(k)
            # named below left, off the curve (which rises to the left), unless it is the lowest point
            fig.add_annotation(x=k.per_user, y=k.total, showarrow=True, arrowhead=2, arrowwidth=2,
                               ax=-90, ay=-60 if k is pts[0] else 60,
                               text=translate(say("knee: {users:g} in flight", users=k.users), lang),
                               font=dict(size=BASE_SIZE, color=INK), bgcolor="rgba(255,255,255,0.85)")
        said = slos.knee_said(pts, slo)
        caps.append(say("{series}: {sentence}", series=name, sentence=said) if show else said)
    # what filled and hollow mean, in the legend
    for label, face in ((say("at least {target:.0%} met the SLO", target=slos.ATTAINMENT), MUTED),
                        (say("fewer met it"), "white")):
        fig.add_scatter(x=[None], y=[None], mode="markers", name=translate(label, lang), hoverinfo="skip",
                        marker=dict(size=16, color=face, line=dict(color=MUTED, width=3)))
    if knees:
        fig.add_scatter(x=[k.per_user for k in knees], y=[k.total for k in knees], mode="markers", hoverinfo="skip",
                        name=translate(say("knee"), lang),
                        marker=dict(symbol="circle-open", size=34, color=INK, line=dict(width=3)))
    fig.update_layout(showlegend=bool(caps),
                      xaxis=dict(title=translate(say("Output tokens / s per user"), lang), rangemode="tozero"),
                      yaxis=dict(title=translate(say("Output tokens / s in total"), lang), rangemode="tozero"))
    if caps:
        cap = [say("Each point is a sweep level, numbered by its requests in flight: further right each user's text "
                   "streams faster, higher up the server makes more in total."), *caps]
    else:
        cap = say("No sweep levels to show yet.")
    return finish(fig, say("Per-user against total throughput"), cap,
                  placeholder=any(is_placeholder(r) for r in runs), height=560, lang=lang)


# -- history ----------------------------------------------------------------------------------------

def _metric_value(run: Any, metric: str) -> float | None:
    if metric == "duration":
        return float(run.duration)
    v = summary_of(run).get(metric)
    return None if v is None else float(v)


def history_compare(runs: Sequence[Any], metric: str = "output_throughput", *, lang: str = "en") -> go.Figure:
    """One bar per saved run for one summary metric (see METRICS); accepts RunResult or store rows."""
    label, unit, better = metric_info(metric)
    name, unit_shown = translate(label, lang), translate(unit, lang)
    pts = [(r, _metric_value(r, metric)) for r in runs]
    have = [(r, v) for r, v in pts if v is not None and not math.isnan(v)]
    missing = len(pts) - len(have)
    # the start time under each label keeps runs with the same label apart
    cats = []
    for r, _ in have:
        lab = wrap(esc(run_label(r, lang)), 18)
        if getattr(r, "started_at", 0):
            when = _when(r.started_at, lang)
            lab += f"<br><span style='font-size:{BASE_SIZE - 4}px;color:{MUTED}'>{when}</span>"
        cats.append(lab)
    vals = [v for _, v in have]
    colors = [_color(r, i) for i, (r, _) in enumerate(have)]
    fig = go.Figure(go.Bar(
        x=cats, y=vals, marker_color=colors, text=[f"<b>{_fmt_num(v)}</b>" for v in vals],
        textposition="outside", cliponaxis=False, showlegend=False, name=name,
        hovertemplate="%{y:,.2f} " + unit_shown + "<extra></extra>",
    ))
    fig.update_layout(
        xaxis=dict(type="category", tickfont=dict(size=BASE_SIZE - 3 if len(cats) > 6 else BASE_SIZE - 1)),
        yaxis=dict(title=translate(say("{metric} ({unit})", metric=label, unit=unit), lang) if unit else name,
                   range=[0, (max(vals) if vals else 1) * 1.18]),
        bargap=0.35,
    )
    if have:
        best_r, best_v = (max if better == "higher" else min)(have, key=lambda p: p[1])
        best = dict(run=run_label(best_r, lang), value=_fmt_num(best_v), unit=unit)
        cap = [say("{run} is best at {value} {unit} (higher is better).", **best) if better == "higher" else
               say("{run} is best at {value} {unit} (lower is better).", **best)]
    else:
        cap = [say("No saved run has {metric} yet.", metric=label)]
    if missing:
        cap.append(say("{count} run(s) without this metric are left out.", count=missing))
    return finish(fig, say("{metric} by run", metric=label), cap, height=520, lang=lang)


# -- two servers at once ----------------------------------------------------------------------------

PAIR_COLORS = (BLUE, VERMILLION)  # side A, side B: one colour each in every panel


def side_by_side(run_a: RunResult, run_b: RunResult, now: float | None = None, bucket_s: float = 1.0, *,
                 lang: str = "en") -> go.Figure:
    """Two servers that ran the same load at once, on ONE time axis (seconds since both started):
    each server's request timeline (a row per request: pale while waiting for the first token, solid
    while generating, grey when failed), then both servers' output tokens per second and each request's
    TTFT at the moment its first token arrived. Works on a live pair (records still in flight are drawn up to `now`,
    default: the latest time seen) and on saved runs. Traces: per side, in order A then B: wait,
    decode, failed bars, throughput line, TTFT markers."""
    runs = [run_a, run_b]
    recs = [sorted(r.measured, key=lambda x: x.index) for r in runs]
    seen = [t for rs in recs for x in rs for t in (x.send_time, x.end_time, *x.chunk_times[-1:]) if t is not None]
    if now is None:
        now = max(seen, default=0.0)
    span = max([now, *seen, *(r.duration for r in runs)], default=0.0) or 1.0
    names = [esc(run_label(r, lang)) for r in runs]
    titles = (*names, translate(say("Output tokens per second"), lang),
              translate(say("Time to first token, drawn when each first token arrived"), lang))
    fig = make_subplots(rows=4, cols=1, shared_xaxes=True, vertical_spacing=0.07,
                        row_heights=[0.27, 0.27, 0.23, 0.23], subplot_titles=titles)
    bar = dict(orientation="h", hoverinfo="text", width=0.8, showlegend=False)
    avgs, ttfts, in_flight, failed = [], [], 0, 0
    for k, (run, rs, color, name) in enumerate(zip(runs, recs, PAIR_COLORS, names)):
        row = k + 1
        wait: tuple[list, list, list, list] = ([], [], [], [])
        dec: tuple[list, list, list, list] = ([], [], [], [])
        fail: tuple[list, list, list, list] = ([], [], [], [])
        for r in rs:
            end = r.end_time if r.end_time is not None else now
            in_flight += r.end_time is None
            first = r.first_token_time
            head = f"<b>{name} #{r.index + 1}</b>"
            if r.error is not None:
                failed += 1
                seg, hover = fail, f"{head}<br>{why_failed(r, lang)}"
                seg[0].append(r.index + 1), seg[1].append(r.send_time), seg[2].append(max(end - r.send_time, 0.0))
                seg[3].append(hover)
                continue
            stop = first if first is not None else end
            wait[0].append(r.index + 1), wait[1].append(r.send_time), wait[2].append(max(stop - r.send_time, 0.0))
            wait[3].append(f"{head}<br>" + translate(say("waiting for first token: {time}",
                                                         time=f"{stop - r.send_time:.2f} s"), lang))
            if first is not None:
                dec[0].append(r.index + 1), dec[1].append(first), dec[2].append(max(end - first, 0.0))
                dec[3].append(f"{head}<br>" + translate(say("generating: {time}, {tokens} tokens",
                                                            time=f"{end - first:.2f} s",
                                                            tokens=r.output_tokens or len(r.chunk_times)), lang))
        for seg, fill in ((wait, rgba(color, 0.3)), (dec, color), (fail, FAILED_COLOR)):
            fig.add_bar(y=seg[0], base=seg[1], x=seg[2], hovertext=seg[3], marker=dict(color=fill, line=dict(width=0)),
                        row=row, col=1, **bar)
        fig.update_yaxes(title_text=translate(say("Request"), lang), autorange="reversed", showgrid=False,
                         row=row, col=1)
        # throughput: a step line from 0 to the last bucket, the average (tokens so far / time) in the legend
        series = stats.tokens_per_second_series(rs, bucket_s)
        xs = [t for t, _ in series] + ([series[-1][0] + bucket_s] if series else [])
        ys = [v for _, v in series] + ([series[-1][1]] if series else [])
        tokens = sum(r.output_tokens for r in rs if r.ok) or sum(len(r.chunk_times) for r in rs)
        took = run.duration or now
        avg = tokens / took if took else 0.0
        avgs.append(avg)
        fig.add_scatter(x=xs, y=ys, mode="lines", line=dict(shape="hv", width=3.5, color=color,
                                                            dash=DASHES[k % len(DASHES)]),
                        name=translate(say("{run} (avg {avg:,.0f} tok/s)", run=name, avg=avg), lang),
                        legendgroup=name, hovertemplate=f"{name}<br>%{{x:.0f}} s: %{{y:,.0f}} tok/s<extra></extra>",
                        row=3, col=1)
        got = [(r.first_token_time, r.ttft * 1000) for r in rs if r.ttft is not None]
        ttfts.append(sorted(v for _, v in got))
        fig.add_scatter(x=[t for t, _ in got], y=[v for _, v in got], mode="markers", name=name, legendgroup=name,
                        showlegend=False, marker=dict(color=color, size=11, symbol="circle" if k == 0 else "diamond",
                                                      line=dict(width=1, color="white")),
                        hovertemplate=f"{name}<br>" + translate(say("first token at {time}", time="%{x:.2f} s"),
                                                                lang) + "<br>TTFT %{y:,.0f} ms<extra></extra>",
                        row=4, col=1)
    fig.update_yaxes(title_text=translate(say("tok/s"), lang), rangemode="tozero", row=3, col=1)
    fig.update_yaxes(title_text=translate(say("TTFT (ms)"), lang), rangemode="tozero", row=4, col=1)
    fig.update_xaxes(range=[0, span * 1.02], showgrid=True)
    fig.update_xaxes(title_text=translate(say("Time since both measurements started (s)"), lang), row=4, col=1)
    if in_flight:
        fig.add_vline(x=now, line=dict(color=MUTED, dash="dot", width=2))
    fig.update_annotations(font=dict(size=BASE_SIZE + 1))
    # the legend under the time axis: above, it would sit on the first timeline's title
    fig.update_layout(barmode="overlay", showlegend=True, legend=dict(y=-0.07, yanchor="top"))

    def median(xs: list[float]) -> float | None:
        return xs[len(xs) // 2] if xs else None

    meds = [median(t) for t in ttfts]
    labels = [run_label(r, lang) for r in runs]
    cap = [say("Both servers got the same requests at the same moments; {a} sustained {avg_a:,.0f} tok/s and "
               "{b} {avg_b:,.0f} tok/s on average.", a=labels[0], b=labels[1], avg_a=avgs[0], avg_b=avgs[1])]
    if None not in meds:
        cap.append(say("Median TTFT: {ttft_a:,.0f} ms on {a}, {ttft_b:,.0f} ms on {b}.", a=labels[0], b=labels[1],
                       ttft_a=meds[0], ttft_b=meds[1]))
    cap.append(say("In each timeline a bar is one request: pale while it waits for its first token, solid while "
                   "it generates."))
    if in_flight:
        cap.append(say("{count} still in flight, drawn up to now.", count=in_flight))
    if failed:
        cap.append(say("{count} failed (grey; hover a bar for why).", count=failed))
    fig = finish(fig, say("Two servers, one workload, one clock"), cap,
                 placeholder=any(is_placeholder(r) for r in runs), height=1140, lang=lang)
    return fig.update_layout(margin=dict(b=150))
