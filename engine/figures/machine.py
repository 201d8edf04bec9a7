"""The machine and the server over time: memory per device and vLLM's /metrics, with labelled event markers.
See docs/measuring.md#telemetry."""
from __future__ import annotations

import copy
import functools
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from engine.figures.theme import BASE_SIZE, BLUE, CONFIG_PALETTE, GREEN, PURPLE, VERMILLION, esc, finish, rgba
from engine.digits import significant
from engine.messages import mark, say, seconds, translate
from engine.metrics import lookup

# The Monitor redraws these two charts every 2 s while a benchmark runs, so they are built as plain
# dicts and validated once by go.Figure(...): plotly's make_subplots / add_scatter(row=) /
# update_*axes validate every property they touch, which made one build ~10x slower (~200 ms on a
# 2-core VM) and was most of what a Monitor viewer cost the app. Values are rounded to what can be
# read off them (0.01 s, 1 MB, 0.1 %, 0.1 tok/s): the JSON sent to every viewer is half as long.

# Plot-area width the event labels are laid out for: a chart beside the sidebar on a 1400 px screen
# (narrower than a projector's, so labels that fit here fit there).
PLOT_PX = 820

MEMORY_TITLE = mark("Memory over time")
MEMORY = mark("memory")  # the series of a sample that names none


def _width(text: str) -> int:
    """How many Latin letters wide `text` is drawn: a CJK character (Korean) takes about two."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def _clip(text: str, width: int) -> str:
    """`text` cut to at most `width` Latin letters wide, with an ellipsis when cut."""
    if _width(text) <= width:
        return text
    out, used = "", 0
    for c in text:
        used += _width(c)
        if used > width - 1:
            break
        out += c
    return out + "…"


Window = tuple[float, float]  # (t0, t1) in the rows' clock: the time axis a page's charts share


def time_window(*rows: Sequence[Mapping[str, Any]]) -> Window | None:
    """The time span every live chart of a page shares: (first, last) "t" over all the rows given
    (memory samples, /metrics samples, events), None when none has a time. Pass it to each chart as
    `window`: then each puts x = 0 at the same moment and spans the same seconds, so a marker (server
    start, ready, a run) sits at the same x on all of them and a viewer can read across."""
    ts = [float(r["t"]) for rs in rows for r in rs if r.get("t") is not None]
    return (min(ts), max(ts)) if ts else None


def _time_axis(samples: Sequence[Mapping[str, Any]], events: Sequence[Mapping[str, Any]],
               window: Window | None) -> tuple[float, float, float]:
    """(offset, lo, hi): what to subtract from sample/event times, and the span of x to show. With a
    `window`, x is seconds since its start over its whole length, whatever this chart's own rows cover
    (the /metrics only begin once a server is ready, memory is sampled all along). Without one, the
    chart's own rows: relative to their first epoch time (times already relative are kept)."""
    if window is not None:
        t0, t1 = float(window[0]), float(window[1])
        return t0, 0.0, max(t1 - t0, 0.0)
    ts = [float(s["t"]) for s in list(samples) + list(events) if s.get("t") is not None]
    offset = min(ts) if ts and min(ts) > 1e8 else 0.0  # epoch seconds
    return offset, (min(ts) - offset if ts else 0.0), (max(ts) - offset if ts else 1.0)


def _x_range(lo: float, hi: float) -> list[float]:
    """The x axis over [lo, hi], with a little room on the right for the last point."""
    return [lo, hi + 0.01 * ((hi - lo) or 1.0)]


@functools.lru_cache(maxsize=8)
def _stacked_panels(rows: int, spacing: float) -> dict[str, Any]:
    """The layout of `rows` panels stacked on one shared time axis, each with a title slot; without
    plotly's default template, which finish replaces anyway and which is most of the dict."""
    layout = make_subplots(rows=rows, cols=1, shared_xaxes=True, vertical_spacing=spacing,
                           subplot_titles=[" "] * rows if rows > 1 else None).to_dict()["layout"]
    layout.pop("template", None)
    return layout


def _panels(titles: Sequence[str], spacing: float) -> dict[str, Any]:
    """A fresh layout dict for stacked panels titled `titles` (no titles for a single panel)."""
    layout = copy.deepcopy(_stacked_panels(len(titles), spacing))
    for note, text in zip(layout.get("annotations", []), titles):
        note.update(text=text, x=0, xanchor="left", font=dict(size=BASE_SIZE))
    return layout


def _axis(kind: str, row: int) -> str:
    """Axis name of a panel in a layout dict: xaxis, yaxis2, …; `_ref` gives its trace reference."""
    return f"{kind}axis" + ("" if row == 1 else str(row))


def _ref(kind: str, row: int) -> str:
    return kind + ("" if row == 1 else str(row))


def event_list(events: Sequence[Mapping[str, Any]], lang: str = "en") -> list[tuple[int, float, str]]:
    """The events with a time, in time order, numbered from 1 as the charts number their markers:
    (number, time, label said in `lang`). One computation for the markers and the list beside them."""
    evs = sorted((e for e in events if e.get("t") is not None), key=lambda e: e["t"])
    return [(i, float(e["t"]), translate(e.get("label", ""), lang)) for i, e in enumerate(evs, 1)]


def _event_marks(events: Sequence[Mapping[str, Any]], offset: float, x_range: tuple[float, float],
                 rows: int = 1, level_step: float = 0.1,
                 lang: str = "en") -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Dotted vertical lines at each event across all `rows` panels, each numbered inside the top one
    (event_list's numbers; the label on hover): (shapes, annotations). Whole labels piled on each other
    where events come close (a run's start and end seconds apart in a 15-minute window); a number is a
    few pixels wide, so numbers rarely collide: they are placed greedily on up to 4 levels so that none
    overlaps another, and one with no free level joins the badge before it as a range ("4–7")."""
    placed: list[list[tuple[float, float]]] = [[] for _ in range(4)]
    lo, hi = x_range
    span = (hi - lo) or 1.0
    shapes: list[dict[str, Any]] = []
    notes: list[dict[str, Any]] = []
    for n, t, label in event_list(events, lang):
        t -= offset
        width = (len(str(n)) * 11 + 14) / PLOT_PX * span  # the number's badge in x units
        right = t + width > hi
        a, b = (t - width, t) if right else (t, t + width)
        lvl = next((k for k, spans in enumerate(placed) if all(a >= y or b <= x for x, y in spans)), None)
        for row in range(1, rows + 1):
            shapes.append(dict(type="line", x0=t, x1=t, xref=_ref("x", row), y0=0, y1=1,
                               yref=_ref("y", row) + " domain", line=dict(color="#555", dash="dot", width=1.5)))
        if lvl is None:
            if notes:  # no room: the badge just before takes this number too ("4–7"), the list names each
                last = notes[-1]
                last["text"] = f"<b>{last['name']}–{n}</b>"
                last["hovertext"] += "<br>" + esc(_clip(label, 60))
            continue
        placed[lvl].append((a, b))
        notes.append(dict(x=t, y=1 - level_step * lvl, xref="x", yref="y domain", text=f"<b>{n}</b>", name=str(n),
                          hovertext=esc(_clip(label, 60)), showarrow=False,
                          xanchor="right" if right else "left", yanchor="top", xshift=-3 if right else 3,
                          font=dict(size=BASE_SIZE - 1, color="#222"), bgcolor="rgba(255,255,255,0.9)",
                          bordercolor="#555", borderwidth=1, borderpad=2))
    return shapes, notes


def memory_chart(samples: Sequence[Mapping[str, Any]], events: Sequence[Mapping[str, Any]] = (),
                 title: str = MEMORY_TITLE, *, window: Window | None = None, lang: str = "en") -> go.Figure:
    """Memory used over time, one panel per series ({t, used_gb, total_gb, series|label}: e.g. GPU 0
    and CPU RAM, whose scales differ), each with its capacity as a dashed line when the use comes
    near it, and labelled vertical event markers ({t, label}). Times may be seconds from any start
    or epoch seconds (then shown relative to the first one); with `window` (see time_window), seconds
    since its start, on the same axis as every other chart given that window."""
    offset, lo, hi = _time_axis(samples, events, window)
    series: dict[str, list[Mapping[str, Any]]] = {}
    for s in samples:
        key = s.get("series") or s.get("label") or MEMORY
        series.setdefault(key if isinstance(key, str) else str(key), []).append(s)
    names = list(series) or [MEMORY]
    shown = {name: translate(name, lang) for name in names}  # a series the engine named with a phrase, said in lang
    nrows = len(names)
    titles = []
    for name in names:
        sizes = [t for p in series.get(name, []) if (t := p.get("total_gb"))]
        titles.append(translate(say("{series} · {total:,.0f} GB in all", series=shown[name], total=float(sizes[-1])),
                                lang) if sizes else shown[name])
    layout = _panels(titles if nrows > 1 else [""], 0.14 if nrows > 1 else 0.02)
    layout[_axis("x", nrows)]["title"] = {"text": translate(say("Time (s)"), lang)}
    traces: list[dict[str, Any]] = []
    notes: list[dict[str, Any]] = list(layout.pop("annotations", []))
    peaks = []
    for i, name in enumerate(names):
        row = i + 1
        pts = sorted(series.get(name, []), key=lambda p: p["t"])
        if not pts:
            continue
        color = CONFIG_PALETTE[i % len(CONFIG_PALETTE)]
        where = dict(xaxis=_ref("x", row), yaxis=_ref("y", row))
        xs = [round(float(p["t"]) - offset, 2) for p in pts]
        used = [float(p.get("used_gb") or 0.0) for p in pts]
        ys = [round(v, 3) for v in used]
        traces.append(dict(type="scatter", x=xs, y=ys, mode="lines", text=[significant(v) for v in used],
                           name=translate(say("{series} used", series=shown[name]), lang),
                           line=dict(color=color, width=3.5), fill="tozeroy", fillcolor=rgba(color, 0.12),
                           showlegend=False,
                           hovertemplate=seconds("%{x:.0f}",
                                                 lang) + ": %{text} GB<extra>" + esc(shown[name]) + "</extra>",
                                                 **where))
        totals = [float(p["total_gb"]) for p in pts if p.get("total_gb")]
        peak = max(used)
        top = peak * 1.35 or 1.0
        if totals:
            tot = totals[-1]
            if peak >= 0.25 * tot:  # capacity line only where it tells something
                top = tot * 1.35
                traces.append(dict(type="scatter", x=[lo, hi], y=[tot, tot], mode="lines",
                                   name=translate(say("{series} capacity", series=shown[name]), lang),
                                   line=dict(color=color, width=1.5, dash="dash"),
                                   hoverinfo="skip", showlegend=False, **where))
                notes.append(dict(x=lo, y=tot, xshift=10, yshift=2,
                                  text=translate(say("capacity {total:,.0f} GB", total=tot), lang),
                                  showarrow=False, xanchor="left", yanchor="bottom", xref=where["xaxis"],
                                  yref=where["yaxis"], font=dict(color=color, size=BASE_SIZE - 3)))
        ytitle = say("{series} used (GB)", series=shown[names[0]]) if nrows == 1 else say("Used (GB)")
        layout[_axis("y", row)].update(title={"text": translate(ytitle, lang)}, range=[0, top])
        peaks.append((name, peak, totals[-1] if totals else None))
    shapes, marks = _event_marks(events, offset, (lo, hi), rows=nrows, lang=lang)
    if samples or events or window is not None:
        for row in range(1, nrows + 1):
            layout[_axis("x", row)]["range"] = _x_range(lo, hi)
    layout.update(shapes=shapes, annotations=notes + marks)
    if peaks:
        parts = [translate(say("{series} peaks at {peak} GB of {total:,.0f} GB", series=shown[n], peak=significant(p),
                               total=t)
                           if t else say("{series} peaks at {peak} GB", series=shown[n], peak=significant(p)), lang)
                 for n, p, t in peaks]
        cap = [say("{peaks}.", peaks="; ".join(parts)),
               say("Dotted lines mark what the server was doing at that moment.")]
    else:
        cap = [say("No memory samples yet.")]
    fig = go.Figure(dict(data=traces, layout=layout))
    return finish(fig, title, cap, height=300 + 230 * nrows if nrows > 1 else 480, lang=lang)


def _value(sample: Mapping[str, Any], key: str) -> float | None:
    """A /metrics value of a sample, under our key or vLLM's name for it (engine.metrics.ALIASES)."""
    v = lookup(sample, key)
    return None if v is None else float(v)


def _break_gaps(pts: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The samples with an empty one inside each pause in /metrics (a server restarting): the lines stop
    there instead of drawing a slope across time nothing was measured. A pause is over 5 s and over three
    times the usual step (a long window's samples are merged into wider steps)."""
    steps = sorted(float(b["t"]) - float(a["t"]) for a, b in zip(pts, pts[1:]))
    if not steps:
        return pts
    gap = max(5.0, 3 * steps[len(steps) // 2])
    out = [pts[0]]
    for a, b in zip(pts, pts[1:]):
        if float(b["t"]) - float(a["t"]) > gap:
            out.append({"t": (float(a["t"]) + float(b["t"])) / 2})
        out.append(b)
    return out


def metrics_chart(samples: Sequence[Mapping[str, Any]], events: Sequence[Mapping[str, Any]] = (), *,
                  window: Window | None = None, lang: str = "en") -> go.Figure:
    """vLLM /metrics over time, three stacked panels sharing the time axis: requests running and
    waiting, KV-cache usage (%), generation tokens/s (from a rate or the generation_tokens_total
    counter). Samples are dicts with a "t" and any of the usual metric names. Times as memory_chart's,
    `window` too (the Monitor passes both charts the same one)."""
    offset, lo, hi = _time_axis(samples, events, window)
    pts = _break_gaps(sorted((s for s in samples if s.get("t") is not None), key=lambda s: s["t"]))
    t = [round(float(s["t"]) - offset, 2) for s in pts]
    run = [_value(s, "running") for s in pts]
    wait = [_value(s, "waiting") for s in pts]
    kv = [_value(s, "kv_usage") for s in pts]
    kv_vals = [v for v in kv if v is not None]
    if kv_vals and max(kv_vals) <= 1.0:
        kv = [None if v is None else v * 100 for v in kv]
    kv_exact, kv_text = kv, ["" if v is None else significant(v) for v in kv]  # 0.40 %, never 0 %
    kv = [None if v is None else round(v, 1) for v in kv]
    tok = [_value(s, "gen_tok_s") for s in pts]
    if all(v is None for v in tok):
        tot = [_value(s, "generation_tokens_total") for s in pts]
        tok = [None]
        for k in range(1, len(pts)):
            a, b = tot[k - 1], tot[k]
            dt = t[k] - t[k - 1]
            tok.append(max(b - a, 0.0) / dt if a is not None and b is not None and dt > 0 else None)
        tok = tok[: len(pts)]
    tok_text = ["" if v is None else significant(v) for v in tok]
    tok = [None if v is None else round(v, 1) for v in tok]
    # the capacity vLLM allocated (its cache_config_info): the 100% the usage is a share of; the newest
    # sample's, as a restarted server (a tuning comparison) may have another
    tokens, blocks, size = (next((v for s in reversed(pts) if (v := _value(s, k)) is not None), None)
                            for k in ("kv_capacity_tokens", "kv_blocks", "kv_block_size"))
    kv_title = (say("KV-cache usage, of {tokens:,.0f} tokens ({blocks:,.0f} blocks of {size:.0f})", tokens=tokens,
                    blocks=blocks, size=size) if tokens and blocks and size else
                say("KV-cache usage, of {tokens:,.0f} tokens", tokens=tokens) if tokens else say("KV-cache usage"))
    layout = _panels([translate(m, lang) for m in (say("Requests in the server"), kv_title,
                                                    say("Generation speed"))], 0.1)
    line = dict(width=3, shape="hv")
    at = dict(x="%{x:.0f}", y="%{y:.0f}")  # plotly's placeholders, kept out of the templates
    traces = [
        dict(x=t, y=run, name=translate(say("running"), lang), line=dict(color=BLUE, **line), xaxis="x", yaxis="y",
             hovertemplate=translate(say("{x} s: {y} running", **at), lang) + "<extra></extra>"),
        dict(x=t, y=wait, name=translate(say("waiting"), lang), line=dict(color=VERMILLION, dash="dash", **line),
             xaxis="x", yaxis="y", hovertemplate=translate(say("{x} s: {y} waiting", **at), lang) + "<extra></extra>"),
        # no fill: plotly fills across a gap (a restart's pause) and would draw a slope nothing measured
        dict(x=t, y=kv, name=translate(say("KV cache used"), lang), line=dict(color=PURPLE, width=3),
             showlegend=False, xaxis="x2", yaxis="y2", text=kv_text,
             hovertemplate=seconds("%{x:.0f}", lang) + ": %{text}%<extra></extra>"),
        dict(x=t, y=tok, name=translate(say("generation tok/s"), lang), line=dict(color=GREEN, width=3),
             showlegend=False, xaxis="x3", yaxis="y3", text=tok_text,
             hovertemplate=seconds("%{x:.0f}", lang) + ": %{text} tok/s<extra></extra>"),
    ]
    for tr in traces:
        tr.update(type="scatter", mode="lines")
    # A preemption (vLLM took a request's KV blocks back to make room; it starts again) marked on the KV
    # panel where the counter rose: a squeezed cache shows them where its usage hits the top.
    # Across a restart (a comparison: the samples pause, then a new server's counter starts at 0) what the
    # new server counts before its first sample is a rise too; a lower count means a restart.
    rose, last, last_k = [], None, 0
    for k, v in enumerate(_value(s, "preemptions_total") for s in pts):
        if v is None:
            continue
        if last is not None and (n := v - last if v >= last else v) > 0:
            rose.append((k, n, last_k))
        last, last_k = v, k
    if rose:
        # at the highest use since the sample before: a request is preempted when the cache is full, and
        # by the next sample its blocks may be free again (a cross at 0% would read as an empty cache)
        top = [max((v for v in kv[j:k + 1] if v is not None), default=100) for k, _n, j in rose]
        traces.append(dict(type="scatter", mode="markers", x=[t[k] for k, _n, _j in rose], y=top,
                           text=[f"{n:.0f}" for _k, n, _j in rose],  # the count, in the hover
                           marker=dict(symbol="x", size=14, color=VERMILLION, line=dict(width=2)),
                           name=translate(say("preempted"), lang), xaxis="x2", yaxis="y2", cliponaxis=False,
                           hovertemplate=translate(say("{x} s: {y} preempted", x="%{x:.0f}", y="%{text}"), lang)
                           + "<extra></extra>"))
    layout["yaxis"].update(title={"text": translate(say("Requests"), lang)}, rangemode="tozero")
    layout["yaxis2"].update(title={"text": translate(say("Used (%)"), lang)}, range=[0, 105])
    layout["yaxis3"].update(title={"text": translate(say("Tokens / s"), lang)}, rangemode="tozero")
    layout["xaxis3"]["title"] = {"text": translate(say("Time (s)"), lang)}
    layout["legend"] = dict(x=1, xanchor="right", y=1.0, yanchor="bottom")
    if t:
        shapes, marks = _event_marks(events, offset, (lo, hi), rows=3, level_step=0.16, lang=lang)  # short top panel
        layout.update(shapes=shapes, annotations=layout["annotations"] + marks)
        for row in (1, 2, 3):  # the range the labels were laid out for
            layout[_axis("x", row)]["range"] = _x_range(lo, hi)
    peak_run = max((v for v in run if v is not None), default=0)
    peak_wait = max((v for v in wait if v is not None), default=0)
    peak_kv = max((v for v in kv_exact if v is not None), default=None)
    if peak_run or peak_wait:
        busy = (say("Up to {running:.0f} requests decoded together and {waiting:.0f} queued waiting for a slot",
                    running=peak_run, waiting=peak_wait) if peak_wait else
                say("Up to {running:.0f} requests decoded together with none left waiting", running=peak_run))
    else:
        busy = say("No requests reached the server in this window")
    # {percent} a value ("0.40 %", never "0 %"), not "{kv}%": a "%" then a space and a letter reads as a %-format
    # to gettext
    percent = f"{significant(peak_kv)} %" if peak_kv is not None else ""
    if peak_kv is None:
        cap = say("{requests}.", requests=busy)
    elif peak_kv >= 90:
        cap = say("{requests}; the KV cache peaked at {percent} full, so memory, not compute, limits the batch.",
                  requests=busy, percent=percent)
    else:
        cap = say("{requests}; the KV cache peaked at {percent} full.", requests=busy, percent=percent)
    caps = [cap]
    if preempted := sum(n for _k, n, _j in rose):
        caps.append(say("{n:.0f} preemptions (the crosses): requests lost their KV blocks to make room and started "
                        "again.", n=preempted))
    return finish(go.Figure(dict(data=traces, layout=layout)), say("vLLM server metrics"), caps, height=720, lang=lang)


def power_chart(samples: Sequence[Mapping[str, Any]], *, window: Window | None = None,
                lang: str = "en") -> go.Figure | None:
    """The GPUs' power draw over time ({t, power_w}, NVML, summed over GPUs), on the Monitor's time axis; None
    without samples (no GPU: the page draws nothing)."""
    pts = sorted((s for s in samples if s.get("power_w") is not None and s.get("t") is not None),
                 key=lambda s: s["t"])
    if not pts:
        return None
    offset, lo, hi = _time_axis(pts, (), window)
    ws = [float(s["power_w"]) for s in pts]
    fig = go.Figure(go.Scatter(x=[round(float(s["t"]) - offset, 2) for s in pts], y=ws, mode="lines",
                               line=dict(width=3, color=VERMILLION), name=translate(say("GPU power"), lang),
                               hovertemplate=translate(say("{x} s: {y} W", x="%{x:.0f}", y="%{y:,.0f}"), lang)
                               + "<extra></extra>"))
    fig.update_layout(xaxis=dict(title=translate(say("Time (s)"), lang), range=_x_range(lo, hi)),
                      yaxis=dict(title=translate(say("Power (W)"), lang), rangemode="tozero"), showlegend=False)
    cap = say("The GPUs' power draw as NVML reports it, summed over the GPUs: {now:,.0f} W now, {peak:,.0f} W at "
              "the peak of this window.", now=ws[-1], peak=max(ws))
    return finish(fig, say("GPU power"), cap, height=300, lang=lang)
