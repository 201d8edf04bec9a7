"""Charts of the machine and the server over time: memory per device (GPU, RAM, the server's
processes) and vLLM's /metrics (requests running and waiting, KV-cache usage, generation speed),
both with labelled event markers (server started, run began, ...).
See docs/architecture.md.
"""
from __future__ import annotations

import copy
import functools
from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from engine.figures.theme import BASE_SIZE, BLUE, CONFIG_PALETTE, GREEN, PURPLE, VERMILLION, esc, finish
from engine.metrics import lookup

# The Monitor redraws these two charts every 2 s while a benchmark runs, so they are built as plain
# dicts and validated once by go.Figure(...): plotly's make_subplots / add_scatter(row=) /
# update_*axes validate every property they touch, which made one build ~10x slower (~200 ms on a
# 2-core VM) and was most of what a Monitor viewer cost the app. Values are rounded to what can be
# read off them (0.01 s, 1 MB, 0.1 %, 0.1 tok/s): the JSON sent to every viewer is half as long.

# Plot-area width the event labels are laid out for: a chart beside the sidebar on a 1400 px screen
# (narrower than a projector's, so labels that fit here fit there).
PLOT_PX = 820


def _rel_times(samples: Sequence[Mapping[str, Any]], events: Sequence[Mapping[str, Any]] = ()) -> float:
    """Offset to subtract from sample/event times: their first epoch time, or 0 if already relative."""
    ts = [float(s["t"]) for s in list(samples) + list(events) if s.get("t") is not None]
    if ts and min(ts) > 1e8:  # epoch seconds
        return min(ts)
    return 0.0


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


def _event_marks(events: Sequence[Mapping[str, Any]], offset: float, x_range: tuple[float, float],
                 rows: int = 1, level_step: float = 0.1) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Dotted vertical lines at each event across all `rows` panels, labelled inside the top one:
    (shapes, annotations). Labels are placed greedily on up to 4 levels so that none overlaps
    another; a label near the right edge is drawn to the left of its line, and one with no free
    level is left out (its line stays) rather than printed over its neighbours."""
    evs = sorted((e for e in events if e.get("t") is not None), key=lambda e: e["t"])
    placed: list[list[tuple[float, float]]] = [[] for _ in range(4)]
    lo, hi = x_range
    span = (hi - lo) or 1.0
    shapes: list[dict[str, Any]] = []
    notes: list[dict[str, Any]] = []
    for e in evs:
        t = float(e["t"]) - offset
        label = str(e.get("label", ""))
        if len(label) > 42:
            label = label[:41] + "…"
        width = (len(label) * 8.5 + 14) / PLOT_PX * span  # label width in x units
        right = t + width > hi
        a, b = (t - width, t) if right else (t, t + width)
        lvl = next((k for k, spans in enumerate(placed) if all(a >= y or b <= x for x, y in spans)), None)
        for row in range(1, rows + 1):
            shapes.append(dict(type="line", x0=t, x1=t, xref=_ref("x", row), y0=0, y1=1,
                               yref=_ref("y", row) + " domain", line=dict(color="#555", dash="dot", width=1.5)))
        if lvl is None:
            continue
        placed[lvl].append((a, b))
        notes.append(dict(x=t, y=1 - level_step * lvl, xref="x", yref="y domain", text=esc(label), showarrow=False,
                          xanchor="right" if right else "left", yanchor="top", xshift=-3 if right else 3,
                          font=dict(size=BASE_SIZE - 3, color="#333"), bgcolor="rgba(255,255,255,0.85)"))
    return shapes, notes


def memory_chart(samples: Sequence[Mapping[str, Any]], events: Sequence[Mapping[str, Any]] = (),
                 title: str = "Memory over time") -> go.Figure:
    """Memory used over time, one panel per series ({t, used_gb, total_gb, series|label}: e.g. GPU 0
    and CPU RAM, whose scales differ), each with its capacity as a dashed line when the use comes
    near it, and labelled vertical event markers ({t, label}). Times may be seconds from any start
    or epoch seconds (then shown relative to the first one)."""
    offset = _rel_times(samples, events)
    series: dict[str, list[Mapping[str, Any]]] = {}
    for s in samples:
        series.setdefault(str(s.get("series") or s.get("label") or "memory"), []).append(s)
    names = list(series) or ["memory"]
    nrows = len(names)
    titles = []
    for name in names:
        totals = [p.get("total_gb") for p in series.get(name, []) if p.get("total_gb")]
        titles.append(f"{name}" + (f" ({float(totals[-1]):,.0f} GB in all)" if totals else ""))
    layout = _panels(titles if nrows > 1 else [""], 0.14 if nrows > 1 else 0.02)
    layout[_axis("x", nrows)]["title"] = {"text": "Time (s)"}
    traces: list[dict[str, Any]] = []
    notes: list[dict[str, Any]] = list(layout.pop("annotations", []))
    peaks = []
    all_t = [float(p["t"]) - offset for pts in series.values() for p in pts]
    all_t += [float(e["t"]) - offset for e in events if e.get("t") is not None]
    for i, name in enumerate(names):
        row = i + 1
        pts = sorted(series.get(name, []), key=lambda p: p["t"])
        if not pts:
            continue
        color = CONFIG_PALETTE[i % len(CONFIG_PALETTE)]
        where = dict(xaxis=_ref("x", row), yaxis=_ref("y", row))
        xs = [round(float(p["t"]) - offset, 2) for p in pts]
        ys = [round(float(p.get("used_gb") or 0.0), 3) for p in pts]
        traces.append(dict(type="scatter", x=xs, y=ys, mode="lines", name=f"{name} used",
                           line=dict(color=color, width=3.5), fill="tozeroy", fillcolor=_rgba(color, 0.12),
                           showlegend=False, hovertemplate="%{x:.0f} s: %{y:.1f} GB<extra>" + esc(name) + "</extra>",
                           **where))
        totals = [float(p["total_gb"]) for p in pts if p.get("total_gb")]
        peak = max(ys)
        top = peak * 1.35 or 1.0
        if totals:
            tot = totals[-1]
            if peak >= 0.25 * tot:  # capacity line only where it tells something
                top = tot * 1.35
                traces.append(dict(type="scatter", x=[min(all_t), max(all_t)], y=[tot, tot], mode="lines",
                                   name=f"{name} capacity", line=dict(color=color, width=1.5, dash="dash"),
                                   hoverinfo="skip", showlegend=False, **where))
                notes.append(dict(x=min(all_t), y=tot, xshift=10, yshift=2, text=f"capacity {tot:,.0f} GB",
                                  showarrow=False, xanchor="left", yanchor="bottom", xref=where["xaxis"],
                                  yref=where["yaxis"], font=dict(color=color, size=BASE_SIZE - 3)))
        ytitle = f"{names[0]} used (GB)" if nrows == 1 else "Used (GB)"
        layout[_axis("y", row)].update(title={"text": ytitle}, range=[0, top])
        peaks.append((name, peak, totals[-1] if totals else None))
    shapes, marks = _event_marks(events, offset, (min(all_t), max(all_t)) if all_t else (0.0, 1.0), rows=nrows)
    if all_t:
        x_range = [min(all_t), max(all_t) + 0.01 * ((max(all_t) - min(all_t)) or 1.0)]
        for row in range(1, nrows + 1):
            layout[_axis("x", row)]["range"] = x_range
    layout.update(shapes=shapes, annotations=notes + marks)
    if peaks:
        parts = [f"{n} peaks at {p:.1f} GB" + (f" of {t:,.0f} GB" if t else "") for n, p, t in peaks]
        cap = "; ".join(parts) + ". Dotted lines mark what the server was doing at that moment."
    else:
        cap = "No memory samples yet."
    fig = go.Figure(dict(data=traces, layout=layout))
    return finish(fig, title, cap, height=300 + 230 * nrows if nrows > 1 else 480)


def _rgba(hex_color: str, alpha: float) -> str:
    h = hex_color.lstrip("#")
    return f"rgba({int(h[0:2], 16)},{int(h[2:4], 16)},{int(h[4:6], 16)},{alpha})"


def _value(sample: Mapping[str, Any], key: str) -> float | None:
    """A /metrics value of a sample, under our key or vLLM's name for it (engine.metrics.ALIASES)."""
    v = lookup(sample, key)
    return None if v is None else float(v)


def metrics_chart(samples: Sequence[Mapping[str, Any]], events: Sequence[Mapping[str, Any]] = ()) -> go.Figure:
    """vLLM /metrics over time, three stacked panels sharing the time axis: requests running and
    waiting, KV-cache usage (%), generation tokens/s (from a rate or the generation_tokens_total
    counter). Samples are dicts with a "t" and any of the usual metric names."""
    offset = _rel_times(samples, events)
    pts = sorted((s for s in samples if s.get("t") is not None), key=lambda s: s["t"])
    t = [round(float(s["t"]) - offset, 2) for s in pts]
    run = [_value(s, "running") for s in pts]
    wait = [_value(s, "waiting") for s in pts]
    kv = [_value(s, "kv_usage") for s in pts]
    kv_vals = [v for v in kv if v is not None]
    if kv_vals and max(kv_vals) <= 1.0:
        kv = [None if v is None else v * 100 for v in kv]
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
    tok = [None if v is None else round(v, 1) for v in tok]
    layout = _panels(("Requests in the server", "KV-cache usage", "Generation speed"), 0.1)
    line = dict(width=3, shape="hv")
    traces = [
        dict(x=t, y=run, name="running", line=dict(color=BLUE, **line), xaxis="x", yaxis="y",
             hovertemplate="%{x:.0f} s: %{y:.0f} running<extra></extra>"),
        dict(x=t, y=wait, name="waiting", line=dict(color=VERMILLION, dash="dash", **line), xaxis="x", yaxis="y",
             hovertemplate="%{x:.0f} s: %{y:.0f} waiting<extra></extra>"),
        dict(x=t, y=kv, name="KV cache used", line=dict(color=PURPLE, width=3), fill="tozeroy",
             fillcolor="rgba(204,121,167,0.2)", showlegend=False, xaxis="x2", yaxis="y2",
             hovertemplate="%{x:.0f} s: %{y:.0f}%<extra></extra>"),
        dict(x=t, y=tok, name="generation tok/s", line=dict(color=GREEN, width=3), showlegend=False,
             xaxis="x3", yaxis="y3", hovertemplate="%{x:.0f} s: %{y:,.0f} tok/s<extra></extra>"),
    ]
    for tr in traces:
        tr.update(type="scatter", mode="lines")
    layout["yaxis"].update(title={"text": "Requests"}, rangemode="tozero")
    layout["yaxis2"].update(title={"text": "Used (%)"}, range=[0, 105])
    layout["yaxis3"].update(title={"text": "Tokens / s"}, rangemode="tozero")
    layout["xaxis3"]["title"] = {"text": "Time (s)"}
    layout["legend"] = dict(x=1, xanchor="right", y=1.0, yanchor="bottom")
    if t:
        ev_t = [float(e["t"]) - offset for e in events if e.get("t") is not None]
        lo, hi = min(t + ev_t), max(t + ev_t)
        shapes, marks = _event_marks(events, offset, (lo, hi), rows=3, level_step=0.16)  # a short top panel
        layout.update(shapes=shapes, annotations=layout["annotations"] + marks)
        for row in (1, 2, 3):  # the range the labels were laid out for
            layout[_axis("x", row)]["range"] = [lo, hi + 0.01 * ((hi - lo) or 1.0)]
    peak_run = max((v for v in run if v is not None), default=0)
    peak_wait = max((v for v in wait if v is not None), default=0)
    peak_kv = max((v for v in kv if v is not None), default=None)
    if peak_run or peak_wait:
        cap = f"Up to {peak_run:.0f} requests decoded together"
        cap += f" and {peak_wait:.0f} queued waiting for a slot" if peak_wait else " with none left waiting"
    else:
        cap = "No requests reached the server in this window"
    if peak_kv is not None:
        cap += f"; the KV cache peaked at {peak_kv:.0f}% full" + (
            ", so memory, not compute, limits the batch." if peak_kv >= 90 else ".")
    else:
        cap += "."
    return finish(go.Figure(dict(data=traces, layout=layout)), "vLLM server metrics", cap, height=720)
