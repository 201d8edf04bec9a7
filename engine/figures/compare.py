"""Charts that compare saved runs: tuning configurations side by side, any summary metric across runs (named
by engine.metrics' catalogue), two servers measured at once on one clock. Each takes `lang`."""
from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from engine.digits import significant
from engine.figures.theme import (
    BASE_SIZE,
    BLUE,
    INK,
    DASHES,
    FAILED_COLOR,
    KIND_COLORS,
    MUTED,
    PALETTE,
    VERMILLION,
    Bars,
    esc,
    finish,
    is_placeholder,
    rgba,
    run_colors,
    run_label,
    summary_of,
    why_failed,
    wrap,
)
from engine.measure.judge import repeats, stats, verdict
from engine.observe import disturbance
from engine.messages import say, say_n, seconds, translate, when
from engine.metrics import metric_info
from engine.results.records import RunResult


def _started(run: Any, runs: Sequence[Any], lang: str) -> list[str]:
    """When `run` started, as History writes it under a bar and the page's tables write a time
    (engine.messages.when): its time to the second, with the date first only when `runs` span several days."""
    days = {datetime.fromtimestamp(r.started_at).date() for r in runs if getattr(r, "started_at", 0)}
    return ([when(run.started_at, lang, "date")] if len(days) > 1 else []) + [when(run.started_at, lang, "time")]


def _color(run: Any, i: int) -> str:
    return KIND_COLORS.get(getattr(run, "kind", ""), PALETTE[i % len(PALETTE)])


# -- step 4: tuning ---------------------------------------------------------------------------------

def _kv_label(run: RunResult) -> str:
    kv = run.extra.server.kv_cache_tokens
    if not kv:
        return ""
    if kv < 1e3:  # a squeezed cache (engine.measure.judge.kvcache): its tokens, not "0 k"
        return say("KV cache {tokens:,} tok", tokens=kv)
    return say("KV cache {m:.2f} M tok", m=kv / 1e6) if kv >= 1e6 else say("KV cache {k:.0f} k tok", k=kv / 1e3)


def tuning_compare(runs: Sequence[RunResult], *, lang: str = "en") -> go.Figure:
    """Two panels side by side: output throughput (tok/s) and wall time per configuration, values on the bars,
    KV-cache capacity under each label when known. A configuration measured several times (a repeat group) is
    one bar at its geometric mean (the centre the caption's verdict compares), with a whisker over the runs'
    range; the caption judges each against the first by engine.measure.judge.verdict."""
    runs = list(runs)
    sets = repeats.sets(runs)
    firsts = [g[0] for g in sets]
    labels = [run_label(r, lang) for r in firsts]
    differ_keys = [k for k in ("max_tokens", "concurrency", "rate")
                   if len({str(getattr(r.load, k)) for r in runs}) > 1]
    cats = []
    for run, label in zip(firsts, labels):
        lab = wrap(esc(label), 14)  # two bars in half a page: short lines keep them apart
        notes = [translate(_kv_label(run), lang)] + [f"{k} {getattr(run.load, k)}" for k in differ_keys
                                     if getattr(run.load, k) is not None] + [translate(_warmth_label(run), lang)]
        if labels.count(label) > 1:  # the same settings measured another time: told apart by when
            notes += _started(run, firsts, lang)
        notes = [x for x in notes if x]
        if notes:
            lab += "".join(f"<br><span style='font-size:{BASE_SIZE - 3}px;color:{MUTED}'>{x}</span>" for x in notes)
        cats.append(lab)
    def measured(g, key: str) -> list[float]:  # a failed repeat (verdict.value None) is left out, never a zero
        return [v for r in g if (v := verdict.value(r, key)) is not None] or [0.0]

    tput = [repeats.spread(measured(g, "output_throughput")) for g in sets]
    wall = [repeats.spread(measured(g, "duration")) for g in sets]
    # Each bar at the centre the caption's verdict compares (a geometric mean of the repeats), so the bars, their
    # numbers and the caption's change never disagree (a median of three can rank two settings the other way).
    tput_at = [verdict.centre(measured(g, "output_throughput")) for g in sets]
    wall_at = [verdict.centre(measured(g, "duration")) for g in sets]
    colors = run_colors(firsts)
    several = any(len(g) > 1 for g in sets)
    # a value above its bar sits where a whisker's cap is drawn: with whiskers it goes inside, at the bar's foot
    # ("auto": above a bar too short to hold it)
    label_at = dict(textposition="auto", insidetextanchor="start") if several else dict(textposition="outside")

    def whisker(spreads: list[repeats.Spread | None], at: list[float]) -> dict | None:
        # the range of each configuration's repeats (none where no repeat gave a finite value)
        if not several:
            return None
        return dict(type="data", symmetric=False, array=[s.high - c if s else 0.0 for s, c in zip(spreads, at)],
                    arrayminus=[c - s.low if s else 0.0 for s, c in zip(spreads, at)], color=MUTED, thickness=2,
                    width=8)

    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.12,
                        subplot_titles=(translate(say("Throughput (higher is better)"), lang),
                                        translate(say("Wall time (lower is better)"), lang)))
    fig.add_bar(x=cats, y=tput_at, error_y=whisker(tput, tput_at), marker_color=colors,
                text=[f"<b>{significant(c)}</b>" for c in tput_at], **label_at, cliponaxis=False,
                showlegend=False, name=translate(say("throughput"), lang),
                hovertemplate="%{y:,.0f} tok/s<extra></extra>", row=1, col=1)
    fig.add_bar(x=cats, y=wall_at, error_y=whisker(wall, wall_at), marker_color=colors,
                text=[f"<b>{seconds(c, lang)}</b>" for c in wall_at], **label_at, cliponaxis=False,
                showlegend=False, name=translate(say("wall time"), lang),
                hovertemplate=seconds("%{y:.2f}", lang) + "<extra></extra>", row=1, col=2)
    fig.update_yaxes(title_text=translate(say("Output tokens / s"), lang),
                     range=[0, max([s.high for s in tput if s] or [1]) * 1.2 or 1], row=1, col=1)
    fig.update_yaxes(title_text=translate(say("Wall time (s)"), lang),
                     range=[0, max([s.high for s in wall if s] or [1]) * 1.2 or 1], row=1, col=2)
    fig.update_xaxes(tickfont=dict(size=BASE_SIZE - 2), type="category", tickangle=0)  # wrapped, never turned
    fig.update_annotations(font=dict(size=BASE_SIZE + 1))
    fig.update_layout(bargap=0.35)
    if len(sets) >= 2:  # each against the first, a finding only beyond the noise of their runs
        # one label twice: told apart by when, as under the bars and as History's caption names such runs
        named = [say("{name} from {time}", name=label, time=when(r.started_at, lang, "time"))
                 if labels.count(label) > 1 else label for r, label in zip(firsts, labels)]
        judged = [verdict.compare_runs(sets[0], g, "output_throughput", name=say("Output throughput"),
                                       label_a=named[0], label_b=name) for g, name in zip(sets[1:], named[1:])]
        parts = [f"{translate(name, lang)}: {translate(v.short, lang)}" for name, v in zip(named[1:], judged)
                 if v is not None]
        cap = [say("Throughput against {run}: {changes}.", run=named[0], changes="; ".join(parts))]
        if any(v is not None and not v.decided for v in judged):
            cap.append(say("A configuration measured once has unknown noise, so no difference here is called real: "
                           "repeat each configuration at least twice to know."))
        # how a finding was judged, said only beside one: a withheld verdict's "within noise" would read as a claim
        elif decided := next((v for v in judged if v is not None and v.disturbed is None), None):
            cap.append(say("Judged by {how}; within noise is no measurable difference on this machine.",
                           how=decided.how))
        # what ran beside which configuration, once each, the consequence said once
        if any(v is not None and v.disturbed for v in judged) and (told := disturbance.said_each(zip(named, sets))):
            # the withheld verdict is said in the effect's own words above ("no verdict: the machine was disturbed")
            cap.append(say("{beside} That noise is not this machine's own: measure those runs again on a quiet "
                           "machine.", beside=told))
    elif sets:
        cap = [say("{run}: {tput} tok/s, {wall} wall time.", run=labels[0], tput=significant(tput_at[0]),
                   wall=seconds(wall_at[0], lang))]
    else:
        cap = [say("No runs to compare yet.")]
    if several:
        cap.append(say("A configuration measured several times is one bar, the geometric mean of its runs (as "
                       "the comparison takes it); the whisker spans their range."))
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
    if any(r.extra.warmth.cold for r in runs):
        cap.append(say("Cold runs (❄) measured a server's first batch of their size: their numbers include one-off "
                       "start-up work."))
    return finish(fig, say("Tuning: throughput and wall time per config"), cap, height=540, lang=lang)


def _warmth_label(run: RunResult) -> str:
    """Under a bar: cold (its server's first batch of that size), warm (after a warm-up), or nothing when unknown."""
    if run.extra.warmth.cold is None:
        return ""
    return say("❄ cold") if run.extra.warmth.cold else say("warm")


# -- history ----------------------------------------------------------------------------------------

def _metric_value(run: Any, metric: str) -> float | None:
    if metric == "duration":
        return float(run.duration)
    v = summary_of(run).get(metric)
    return None if v is None else float(v)


# Label room across the history chart (half a 1920-pixel page): about this many Latin letters at the tick size,
# shared by the bars, so that neighbouring labels never run into each other (a Hangul letter counts two).
_TICK_ROOM = 64


def _apart(runs: Sequence[Any], lang: str, width: int) -> dict[int, str]:
    """Under each bar, when it started, as the page's table writes a time (engine.messages.when): the time (to the
    second where a label is shown twice, as the caption's verdict names such runs,
    engine.measure.judge.verdict.labels_apart), the date only when the runs span several days, a repeat's place on
    its own line; each line wrapped to `width` letters ("오전 9:37:41" under eight bars ran into its neighbours)."""
    stamps = [datetime.fromtimestamp(r.started_at) for r in runs if getattr(r, "started_at", 0)]
    several_days = len({d.date() for d in stamps}) > 1
    labels = [run_label(r, lang) for r in runs]
    out: dict[int, str] = {}
    for r, label in zip(runs, labels):
        if not getattr(r, "started_at", 0):
            continue
        lines = [when(r.started_at, lang, "date")] if several_days else []
        lines.append(when(r.started_at, lang, "time" if labels.count(label) > 1 else "minute"))
        if r.extra.repeat.index:  # repeats share a label: said which one each is
            lines.append(translate(say("repeat {i}/{n}", i=r.extra.repeat.index, n=r.extra.repeat.total or "?"),
                                   lang))
        out[id(r)] = "<br>".join(wrap(line, width) for line in lines)
    return out


def _named(run: Any, runs: Sequence[Any], lang: str) -> str:
    """A run (or its set of repeats) as the caption names it: its label, with its start to the second where another
    shown run, not a repeat of its own load test, has the same label (as under its bar)."""
    label, group = run_label(run, lang), run.extra.repeat.group
    if not any(run_label(r, lang) == label for r in runs if r is not run and not (group and r.extra.repeat.group ==
                                                                                    group)):
        return label  # its label alone among the other sets: a load test's own repeats share it
    return say("{name} from {time}", name=label, time=when(run.started_at, lang, "time"))


def history_compare(runs: Sequence[Any], metric: str = "output_throughput", *, lang: str = "en") -> go.Figure:
    """One bar per saved run for one summary metric (see METRICS); accepts RunResult or store rows. A load test's
    repeats share a colour, with a dashed line across them at the centre the caption's verdict compares."""
    label, unit, better = metric_info(metric)
    name, unit_shown = translate(label, lang), translate(unit, lang)
    pts = [(r, _metric_value(r, metric)) for r in runs]
    have = [(r, v) for r, v in pts if v is not None and not math.isnan(v)]
    missing = len(pts) - len(have)
    shown = [r for r, _ in have]
    labels = [run_label(r, lang) for r in shown]
    one_label = len(shown) > 1 and len(set(labels)) == 1  # said once, under the axis, not under every bar
    # One position per run on the axis, its label only the tick's text: two runs whose labels read the same are
    # still two bars (as categories they were one, stacked, the top one's number lost). The start time under each
    # label and, where even that is the same, the run's id tell them apart to the eye.
    ticks: list[str] = []
    width = max(6, min(18, _TICK_ROOM // max(len(have), 1)))  # the more bars, the shorter a label's lines
    small_size = BASE_SIZE - 4
    when = _apart(shown, lang, width * BASE_SIZE // small_size)  # smaller letters: more of them in a bar's room
    small = f"<span style='font-size:{small_size}px;color:{MUTED}'>"
    for r, text in zip(shown, labels):
        lab = "" if one_label else wrap(esc(text), width)
        if id(r) in when:
            lab += ("<br>" if lab else "") + small + when[id(r)] + "</span>"
        if lab in ticks:  # the same label in the same second: the id's first characters that differ
            rid, k = str(getattr(r, "id", "")), 4
            while any(f">{rid[:k]}</span>" in t for t in ticks) and k < len(rid):
                k += 4
            lab += f"<br>{small}{esc(rid[:k])}</span>"
        ticks.append(lab)
    vals = [v for _, v in have]
    sets = repeats.sets(shown)
    grouped = any(len(g) > 1 for g in sets)
    set_of = {id(r): k for k, g in enumerate(sets) for r in g}
    # repeats of one load test in one colour, another set in another; without repeats, a colour per kind of run
    colors = [PALETTE[set_of[id(r)] % len(PALETTE)] if grouped else _color(r, i) for i, r in enumerate(shown)]
    fig = go.Figure(go.Bar(
        x=list(range(len(vals))), y=vals, marker_color=colors, cliponaxis=False, showlegend=False, name=name,
        customdata=labels,
        hovertemplate="%{customdata}: %{y:,.2f} " + unit_shown + "<extra></extra>",
    ))
    # Each number on the page's white above its bar, at its full size: a bar's own text has no background, so a
    # repeats' dashed line at their centre ran through a shorter bar's number (seen on '108' and '117').
    for i, v in enumerate(vals):
        fig.add_annotation(x=i, y=v, yanchor="bottom", yshift=2, text=f"<b>{significant(v)}</b>", showarrow=False,
                           bgcolor="white", borderpad=1, font=dict(size=BASE_SIZE, color=INK))
    value_of = {id(r): v for r, v in have}

    def centre_of(g: Sequence[Any]) -> float:
        """A set's centre as the verdict takes it (a repeat cut short left out); a run alone, its own value."""
        return verdict.centre([x for r in g if (x := verdict.value(r, metric)) is not None]
                              or [value_of[id(r)] for r in g])

    centres = []
    for k, g in enumerate(sets):
        if len(g) < 2:
            continue
        at = [i for i, r in enumerate(shown) if set_of[id(r)] == k]
        centre = centre_of(g)
        centres.append((g, centre))
        # under the bars and their numbers: seen in the gaps and above the shorter bars, hidden behind a number
        fig.add_shape(type="line", x0=min(at) - 0.45, x1=max(at) + 0.45, y0=centre, y1=centre, layer="below",
                      line=dict(color=INK, width=3, dash="dash"))
    fig.update_layout(
        xaxis=dict(tickmode="array", tickvals=list(range(len(vals))), ticktext=ticks, tickangle=0,  # never turned
                   range=[-0.5, len(vals) - 0.5],
                   title=dict(text=esc(labels[0]), font=dict(size=BASE_SIZE - 1)) if one_label else None,
                   tickfont=dict(size=BASE_SIZE - 3 if len(ticks) > 6 else BASE_SIZE - 1)),
        yaxis=dict(title=translate(say("{metric} ({unit})", metric=label, unit=unit), lang) if unit else name,
                   range=[0, (max(vals) if vals and max(vals) > 0 else 1) * 1.2]),  # room for the top bar's number
        bargap=0.35,
    )
    if have:
        # Which is first is a finding only beyond the noise: the sets of repeats (a run alone is a set of one)
        # ranked by the centre the verdict compares, the first against the next, and the words follow the verdict.
        ranked = sorted(((g, centre_of(g)) for g in sets),
                        key=lambda p: p[1], reverse=better == "higher")
        (top, top_at), nxt = ranked[0], ranked[1][0] if len(ranked) > 1 else None
        judged = None
        if nxt is not None:
            first_a, first_b = (min(g, key=lambda r: r.started_at) for g in (nxt, top))
            a, b = verdict.labels_apart(first_a, first_b, run_label(first_a, lang), run_label(first_b, lang),
                                        lang=lang)
            judged = verdict.compare_runs(nxt, top, metric, name=label, label_a=a, label_b=b, unit=unit)
        best = dict(run=_named(min(top, key=lambda r: r.started_at), shown, lang), value=significant(top_at),
                    unit=unit)
        if nxt is None and len(top) > 1:  # one load test's repeats: their centre is the dashed line's, said below
            cap = []
        elif nxt is None or (judged is not None and judged.finding):
            cap = [say("Highest: {run}, {value} {unit} (higher is better).", **best) if better == "higher" else
                   say("Lowest: {run}, {value} {unit} (lower is better).", **best)]
        elif judged is not None and judged.finding is False:
            cap = [say("No run is best beyond noise: the two best are level on this machine.")]
        else:  # one value a side, or a disturbed run: nothing ranked, the verdict (naming both) says why
            cap = [say("No run is named best: the two best cannot be told apart yet.")]
        if judged is not None:
            cap.append(judged.said)
        if centres:  # the dashed lines: which number each is, from the one computation the verdict uses
            each = "; ".join(translate(say("{run}: {value} {unit}", run=_named(min(g, key=lambda r: r.started_at),
                                                                              shown, lang),
                                           value=significant(c), unit=unit), lang) for g, c in centres)
            cap.append(say("Bars of one colour are the repeats of one load test; the dashed line across them is their "
                           "geometric mean, the value a comparison takes ({each}).", each=each))
    else:
        cap = [say("No saved run has {metric} yet.", metric=label)]
    if missing:
        cap.append(say_n("{n} run without this metric is left out.", "{n} runs without this metric are left out.",
                         missing))
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
        wait, dec, fail = Bars(), Bars(), Bars()
        for r in rs:
            end = r.end_time if r.end_time is not None else now
            in_flight += r.end_time is None
            first = r.first_token_time
            head = f"<b>{name} #{r.index + 1}</b>"
            if r.error is not None:
                failed += 1
                fail.add(r.index + 1, r.send_time, max(end - r.send_time, 0.0), f"{head}<br>{why_failed(r, lang)}")
                continue
            stop = first if first is not None else end
            wait.add(r.index + 1, r.send_time, max(stop - r.send_time, 0.0), f"{head}<br>" + translate(
                say("waiting for first token: {time}", time=seconds(stop - r.send_time, lang)), lang))
            if first is not None:
                dec.add(r.index + 1, first, max(end - first, 0.0), f"{head}<br>" + translate(
                    say("generating: {time}, {tokens} tokens", time=seconds(end - first, lang),
                        tokens=r.output_tokens or len(r.chunk_times)), lang))
        for bars, fill in ((wait, rgba(color, 0.3)), (dec, color), (fail, FAILED_COLOR)):
            fig.add_bar(y=bars.y, base=bars.base, x=bars.x, hovertext=bars.hover,
                        marker=dict(color=fill, line=dict(width=0)), row=row, col=1, **bar)
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
                        name=translate(say("{run} (avg {avg} tok/s)", run=name, avg=significant(avg)), lang),
                        legendgroup=name,
                        hovertemplate=f"{name}<br>{seconds('%{x:.0f}', lang)}: %{{y:,.0f}} tok/s<extra></extra>",
                        row=3, col=1)
        got = [(r.first_token_time, r.ttft * 1000) for r in rs if r.ttft is not None]
        ttfts.append(sorted(v for _, v in got))
        fig.add_scatter(x=[t for t, _ in got], y=[v for _, v in got], mode="markers", name=name, legendgroup=name,
                        showlegend=False, marker=dict(color=color, size=11, symbol="circle" if k == 0 else "diamond",
                                                      line=dict(width=1, color="white")),
                        hovertemplate=f"{name}<br>" + translate(say("first token at {time}",
                                                                    time=seconds("%{x:.2f}", lang)),
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
    cap = [say("Both servers got the same requests at the same moments; {a} sustained {avg_a} tok/s and "
               "{b} {avg_b} tok/s on average.", a=labels[0], b=labels[1], avg_a=significant(avgs[0]),
               avg_b=significant(avgs[1]))]
    if None not in meds:
        cap.append(say("Median TTFT: {ttft_a} ms on {a}, {ttft_b} ms on {b}.", a=labels[0], b=labels[1],
                       ttft_a=significant(meds[0]), ttft_b=significant(meds[1])))
    if not in_flight:  # which server did better is a finding only beyond the noise of its requests
        cap += [v.said for v in verdict.of_pair([run_a], [run_b], *verdict.labels_apart(run_a, run_b, *labels))]
    cap.append(say("In each timeline a bar is one request: pale while it waits for its first token, solid while "
                   "it generates."))
    if in_flight:
        cap.append(say("{count} still in flight, drawn up to now.", count=in_flight))
    if failed:
        cap.append(say("{count} failed (grey; hover a bar for why).", count=failed))
    fig = finish(fig, say("Two servers, one workload, one clock"), cap,
                 placeholder=any(is_placeholder(r) for r in runs), height=1140, lang=lang)
    return fig.update_layout(margin=dict(b=150))
