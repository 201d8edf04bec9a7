"""Plotly figures from runs: the pages, the CLI and the docs draw the same charts.

Every figure function returns a `go.Figure` built for a projector (big fonts, Okabe-Ito colours that
colour-blind viewers can tell apart, few gridlines, units on every axis) with a short title. Each
also carries a one-sentence caption that tells a viewer what to notice: read it with
`caption(fig)` (it lives in `fig.layout.meta["caption"]`), e.g.

    fig = figures.request_timeline(run)
    st.plotly_chart(fig); st.caption(figures.caption(fig))

Pure plotly: nothing here imports streamlit, torch or vllm.
"""
from __future__ import annotations

import copy
import functools
import html
import math
import os
import warnings
from datetime import datetime
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import plotly.graph_objects as go
import plotly.io as pio
from plotly.subplots import make_subplots

from engine.measure import stats
from engine.results.records import RequestRecord, RunResult

# -- style ------------------------------------------------------------------------------------------

FONT = "Inter, 'Segoe UI', 'Helvetica Neue', Arial, 'Liberation Sans', 'DejaVu Sans', sans-serif"
BASE_SIZE = 18
TITLE_SIZE = 26
INK = "#1a1a1a"
GRID = "#e3e3e3"
MUTED = "#6b6b6b"

# Okabe-Ito: distinguishable with every common colour-vision deficiency. Yellow left out (white bg).
BLUE, VERMILLION, GREEN, ORANGE, PURPLE, SKY, BLACK = (
    "#0072B2", "#D55E00", "#009E73", "#E69F00", "#CC79A7", "#56B4E9", "#000000")
PALETTE = [BLUE, VERMILLION, GREEN, ORANGE, PURPLE, SKY, BLACK]
KIND_COLORS = {"vllm": BLUE, "naive": VERMILLION, "static-batch": GREEN}
WAIT_COLOR = ORANGE  # send -> first token (queue + prefill)
DECODE_COLOR = BLUE  # first token -> last token
FAILED_COLOR = "#8c8c8c"

PLACEHOLDER_NOTE = "Shape-only Llama 3 8B: random weights, so any text shown is meaningless"
TEMPLATE_NAME = "serving_lab"


def template(base_size: int = BASE_SIZE) -> go.layout.Template:
    """The shared look: large type, white background, light value-axis grid only, legend on top."""
    axis = dict(
        showgrid=False, zeroline=False, showline=True, linecolor="#444", linewidth=1.5,
        ticks="outside", tickcolor="#444", ticklen=6, automargin=True,
        title=dict(font=dict(size=base_size + 1), standoff=12),
        tickfont=dict(size=base_size - 1), gridcolor=GRID, gridwidth=1,
    )
    return go.layout.Template(
        layout=dict(
            font=dict(family=FONT, size=base_size, color=INK),
            title=dict(font=dict(size=base_size + 8, color=INK), x=0.01, xanchor="left",
                       y=0.97, yanchor="top", automargin=True),
            paper_bgcolor="white", plot_bgcolor="white",
            colorway=PALETTE,
            xaxis=axis, yaxis={**axis, "showgrid": True},
            legend=dict(orientation="h", x=0, xanchor="left", y=1.0, yanchor="bottom",
                        font=dict(size=base_size - 1), bgcolor="rgba(255,255,255,0)",
                        itemclick="toggle"),
            hoverlabel=dict(font=dict(family=FONT, size=base_size - 2), align="left"),
            margin=dict(l=20, r=30, t=110, b=20),
            bargap=0.25, bargroupgap=0.06,
            annotationdefaults=dict(font=dict(size=base_size - 2)),
        )
    )


pio.templates[TEMPLATE_NAME] = template()


def caption(fig: go.Figure) -> str:
    """The one-sentence caption a figure function attached: what a viewer should notice."""
    meta = fig.layout.meta
    return (meta or {}).get("caption", "") if isinstance(meta, dict) else ""


def is_placeholder(run: Any) -> bool:
    """True for the shape-only Llama 3 8B (random weights): its text means nothing."""
    extra = getattr(run, "extra", None) or {}
    return bool(extra.get("placeholder_text")) or "shape-only" in (getattr(run, "model", "") or "").lower()


def _finish(fig: go.Figure, title: str, cap: str, *, placeholder: bool = False,
            height: int | None = None) -> go.Figure:
    subtitle = PLACEHOLDER_NOTE if placeholder else None
    fig.update_layout(
        template=TEMPLATE_NAME,
        title=dict(text=title, subtitle=dict(text=subtitle, font=dict(size=BASE_SIZE - 1, color=VERMILLION))
                   if subtitle else None),
        meta={"caption": cap + (f" ({PLACEHOLDER_NOTE}.)" if placeholder else "")},
    )
    shown = [t for t in fig.data if t.showlegend is not False and t.name]
    has_legend = fig.layout.showlegend is True or (fig.layout.showlegend is None and len(shown) >= 2)
    top = 110 if has_legend else 80
    if fig.layout.annotations and any(a.yref == "paper" and (a.y or 0) >= 1 for a in fig.layout.annotations):
        top = max(top, 110)  # subplot titles
    fig.update_layout(margin=dict(t=top + (34 if placeholder else 0)))
    if height:
        fig.update_layout(height=height)
    return fig


# -- small helpers ----------------------------------------------------------------------------------

def _measured(run: RunResult) -> list[RequestRecord]:
    return sorted(run.measured, key=lambda r: r.index)


def _summary(run: Any) -> dict[str, Any]:
    s = getattr(run, "summary", None) or {}
    if s or not getattr(run, "records", None):
        return s
    return stats.summarize(run.records, run.duration)


def _label(run: Any) -> str:
    return getattr(run, "label", "") or getattr(run, "kind", "") or getattr(run, "id", "run")


def _color(run: Any, i: int) -> str:
    return KIND_COLORS.get(getattr(run, "kind", ""), PALETTE[i % len(PALETTE)])


CONFIG_PALETTE = [BLUE, GREEN, ORANGE, PURPLE, SKY, VERMILLION, BLACK]
DASHES = ["solid", "dash", "dot", "dashdot", "longdash"]


def _colors(runs: Sequence[Any]) -> list[str]:
    """Kind colours (naive vermillion, vLLM blue, ...) when every run is of another kind; otherwise
    one colour per run, so two vLLM configs never share a colour."""
    kinds = [getattr(r, "kind", "") for r in runs]
    if len(set(kinds)) == len(kinds) and all(k in KIND_COLORS for k in kinds):
        return [KIND_COLORS[k] for k in kinds]
    return [CONFIG_PALETTE[i % len(CONFIG_PALETTE)] for i in range(len(runs))]


def _wrap(text: str, width: int = 18) -> str:
    """Break a label into <br>-separated lines of about `width` characters."""
    words, lines, cur = text.split(), [], ""
    for w in words:
        if cur and len(cur) + 1 + len(w) > width:
            lines.append(cur)
            cur = w
        else:
            cur = f"{cur} {w}".strip()
    if cur:
        lines.append(cur)
    return "<br>".join(lines)


def _short(text: str, n: int) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= n else text[: n - 1].rstrip() + "…"


def _esc(text: str) -> str:
    return html.escape(text or "", quote=False)


def _why(r: RequestRecord) -> str:
    """Why a request failed, for its hover: the cause sentence (what happened, what to do), wrapped."""
    return _wrap(_esc(stats.failure_cause(r.error)), 64) if r.error else "unfinished"


def _preview(r: RequestRecord, placeholder: bool, n: int = 90) -> str:
    if not r.output_text:
        return ""
    tag = "[meaningless text, random-weight model] " if placeholder else ""
    return "<br>answer: " + _esc(tag + _short(r.output_text, n))


def _fmt_s(x: float) -> str:
    return f"{x * 1000:.0f} ms" if x < 1 else f"{x:.1f} s"


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
        return f"{who} about as fast"
    return f"{who} {s:.1f}× faster" if s > 1 else f"{who} {1 / s:.1f}× slower"


def _rel_times(samples: Sequence[Mapping[str, Any]], events: Sequence[Mapping[str, Any]] = ()) -> float:
    """Offset to subtract from sample/event times: their first epoch time, or 0 if already relative."""
    ts = [float(s["t"]) for s in list(samples) + list(events) if s.get("t") is not None]
    if ts and min(ts) > 1e8:  # epoch seconds
        return min(ts)
    return 0.0


# -- step 1-2: naive vs vLLM per request ------------------------------------------------------------

def latency_bars(naive_run: RunResult | None, vllm_run: RunResult | None,
                 extra_runs: Iterable[RunResult] = ()) -> go.Figure:
    """Grouped per-request latency bars: naive vs vLLM (+ e.g. static batching); averages in the
    legend, the speed-up in the title. Either of the two main runs may be None."""
    runs = [r for r in (naive_run, vllm_run, *extra_runs) if r is not None]
    fig = go.Figure()
    indices = sorted({r.index for run in runs for r in run.measured})
    xcat = {idx: f"#{k + 1}" for k, idx in enumerate(indices)}
    n_bars = sum(len(run.measured) for run in runs)
    avgs: dict[str, float] = {}
    placeholder = any(is_placeholder(r) for r in runs)
    colors = _colors(runs)
    for i, run in enumerate(runs):
        recs = _measured(run)
        lat = [r.e2e if r.ok else None for r in recs]
        ok = [v for v in lat if v is not None]
        avg = sum(ok) / len(ok) if ok else float("nan")
        avgs[run.kind if run in (naive_run, vllm_run) else run.id] = avg
        hover = [
            f"<b>{_esc(_label(run))}</b><br>{_esc(_short(r.prompt, 60))}<br>"
            + (f"latency {r.e2e:.2f} s · {r.output_tokens} tokens"
               + (f" · {r.output_tokens / r.e2e:.0f} tok/s" if r.e2e else "")
               if r.ok else f"failed<br>{_why(r)}")
            for r in recs
        ]
        fig.add_bar(
            x=[xcat[r.index] for r in recs], y=[v if v is not None else 0 for v in lat],
            name=f"{_esc(_label(run))} " + ("(all failed)" if math.isnan(avg) else f"(avg {avg:.1f} s)"),
            marker_color=colors[i],
            text=[f"{v:.1f}" if v is not None else "failed" for v in lat] if n_bars <= 30 else None,
            textposition="outside", textfont=dict(size=BASE_SIZE - 2),
            hovertext=hover, hoverinfo="text", cliponaxis=False,
        )
    fig.update_layout(barmode="group", xaxis_title="Request", yaxis=dict(title="Latency (s)", rangemode="tozero"),
                      xaxis=dict(type="category", categoryorder="array",
                                 categoryarray=[xcat[i] for i in indices]))
    na = avgs.get("naive") if naive_run is not None else None
    va = avgs.get("vllm") if vllm_run is not None else None
    if na and va and not (math.isnan(na) or math.isnan(va)):
        title = f"Latency per request: {_speedup_phrase(na, va)}"
        cap = (f"Each group of bars is the same prompt: vLLM answers in {va:.1f} s on average, the "
               f"naive transformers loop in {na:.1f} s, a {na / va:.1f}× speed-up from the engine "
               f"alone, before any batching.")
    else:
        title = "Latency per request"
        said = [f"{_label(run)} " + ("failed on every request (hover a 'failed' label for why)" if math.isnan(avg)
                                     else f"averages {avg:.1f} s") for run, avg in zip(runs, avgs.values())]
        cap = f"Each bar is one request; {'; '.join(said)}." if runs else "No runs to show yet."
    return _finish(fig, title, cap, placeholder=placeholder, height=520)


# -- step 3: concurrent requests --------------------------------------------------------------------

def concurrent_latency_bars(run: RunResult) -> go.Figure:
    """Horizontal per-request latency bars, labelled with each prompt's first 30 characters, and a
    dashed line at the run's wall time (the layout's first shape, x = run.duration)."""
    recs = _measured(run)
    placeholder = is_placeholder(run)
    n = len(recs)
    labels = [f"#{k + 1}  {_esc(_short(r.prompt, 30))}" for k, r in enumerate(recs)]
    lat = [r.e2e if r.e2e is not None else 0.0 for r in recs]
    colors = [DECODE_COLOR if r.ok else FAILED_COLOR for r in recs]
    text = [f"{v:.1f} s · {r.output_tokens} tok" if r.ok else "failed" for v, r in zip(lat, recs)]
    hover = [f"<b>{_esc(r.prompt)}</b><br>" + (
        f"latency {r.e2e:.2f} s · first token after {_fmt_s(r.ttft or 0)} · {r.output_tokens} tokens"
        if r.ok else f"failed<br>{_why(r)}") + _preview(r, placeholder)
        for r in recs]
    fig = go.Figure(go.Bar(
        y=labels, x=lat, orientation="h", marker_color=colors, name="Latency", showlegend=False,
        text=text, textposition="auto", insidetextanchor="end", textangle=0,
        insidetextfont=dict(size=BASE_SIZE - 2, color="white"),
        outsidetextfont=dict(size=BASE_SIZE - 2, color=INK), cliponaxis=False,
        hovertext=hover, hoverinfo="text",
    ))
    wall = float(run.duration)
    ok = [r.e2e for r in recs if r.ok and r.e2e is not None]
    serial = sum(ok)
    avg = serial / len(ok) if ok else 0.0
    fig.add_vline(x=wall, line=dict(color=BLACK, dash="dash", width=2.5),
                  annotation=dict(text=f"wall time {wall:.1f} s", font=dict(size=BASE_SIZE - 1),
                                  yanchor="bottom", xanchor="right"),
                  annotation_position="top right")
    xmax = max([wall, *lat]) if lat else wall
    fig.update_layout(
        xaxis=dict(title="Latency (s)", showgrid=True, range=[0, xmax * 1.12 if xmax else 1]),
        yaxis=dict(showgrid=False, autorange="reversed", type="category", categoryorder="array",
                   categoryarray=labels, tickfont=dict(size=BASE_SIZE - 2)),
        bargap=0.3, margin=dict(t=120),
    )
    nfail = sum(1 for r in recs if not r.ok)
    if nfail == n:  # nothing was answered: no batching to show, only that and why
        title = f"{n} requests at once: all {n} failed"
        cap = "No request was answered; each grey bar ends when it failed (hover a bar for why)."
    else:
        done = f"{n - nfail} done, {nfail} failed" if nfail else "all done"
        title = f"{n} requests at once: {done} in {wall:.1f} s"
        cap = (f"{'All ' if not nfail else 'The '}{n - nfail} requests {'that succeeded ' if nfail else ''}were in "
               f"flight together and finished within {wall:.1f} s of wall time (average latency {avg:.1f} s); "
               f"served one after another they would have taken about {serial:.0f} s, the serial sum of their "
               "latencies.")
        if nfail:
            cap += f" {nfail} failed (grey; hover a bar for why)."
    return _finish(fig, title, cap, placeholder=placeholder, height=max(420, 46 * n + 190))


# -- continuous batching made visible ---------------------------------------------------------------

def request_timeline(run: RunResult, now: float | None = None, show_tokens: bool | None = None,
                     include_warmup: bool = False) -> go.Figure:
    """One horizontal bar per request from send to finish: orange while waiting for the first
    token (queue + prefill), blue while generating. A finished request with no first-token time
    (not streamed, e.g. the naive baseline) is one bar in its run's colour. Traces, in order:
    0 "wait", 1 "decode", 2 "failed" bars, 3 failed ✕ markers, 4 "not streamed" bars, then token
    ticks when shown. Requests still in flight (end_time None) are drawn up to `now` (seconds from
    the run's start; default: the latest time seen in the records)."""
    recs = sorted(run.records if include_warmup else run.measured, key=lambda r: (r.send_time, r.index))
    placeholder = is_placeholder(run)
    if now is None:
        seen = [t for r in recs for t in (r.send_time, r.end_time, r.first_token_time, *r.chunk_times[-1:])
                if t is not None]
        now = max(seen, default=0.0)
    streaming = any(r.first_token_time is not None for r in recs)
    rows = [f"#{r.index + 1}" for r in recs]
    seg: dict[str, tuple[list, list, list, list]] = {k: ([], [], [], []) for k in ("wait", "dec", "fail", "whole")}

    def add(kind: str, row: str, start: float, stop: float, hover: str) -> None:
        y, b, x, h = seg[kind]
        y.append(row)
        b.append(start)
        x.append(max(stop - start, 0.0))
        h.append(hover)

    tick_x: list[float] = []
    tick_y: list[str] = []
    in_flight = 0
    for row, r in zip(rows, recs):
        end = r.end_time if r.end_time is not None else now
        running = r.end_time is None
        in_flight += running
        head = f"<b>{row}</b> {_esc(_short(r.prompt, 50))}"
        if r.error is not None:
            add("fail", row, r.send_time, end,
                f"{head}<br>failed after {_fmt_s(end - r.send_time)}<br>{_why(r)}")
            continue
        first = r.first_token_time
        if first is None and (not running or not streaming):
            add("whole", row, r.send_time, end,
                f"{head}<br>{'running for' if running else 'took'} {_fmt_s(end - r.send_time)}"
                f"{'' if running else f', {r.output_tokens} tokens'} (no per-token timing)"
                + _preview(r, placeholder))
            continue
        wait_end = first if first is not None else end
        add("wait", row, r.send_time, wait_end,
            f"{head}<br>waiting for first token: {_fmt_s(wait_end - r.send_time)}"
            + (" (still waiting)" if first is None else ""))
        if first is not None:
            add("dec", row, first, end,
                f"{head}<br>generating: {_fmt_s(end - first)}, {r.output_tokens or len(r.chunk_times)} tokens"
                + (" (in flight)" if running else f"<br>total {_fmt_s(end - r.send_time)}")
                + _preview(r, placeholder))
        tick_x += r.chunk_times
        tick_y += [row] * len(r.chunk_times)
    n = len(recs)
    bar = dict(orientation="h", hoverinfo="text", width=0.72)
    fig = go.Figure()
    names = {"wait": "waiting for 1st token (queue + prefill)", "dec": "generating tokens (decode)",
             "fail": "failed", "whole": "whole request (not streamed)"}
    colors = {"wait": WAIT_COLOR, "dec": DECODE_COLOR, "fail": FAILED_COLOR,
              "whole": KIND_COLORS.get(run.kind, VERMILLION) if run.kind != "vllm" else SKY}
    for kind in ("wait", "dec", "fail"):
        y, b, x, h = seg[kind]
        fig.add_bar(y=y, base=b, x=x, name=names[kind], marker=dict(color=colors[kind], line=dict(width=0)),
                    hovertext=h, showlegend=bool(y), **bar)
    fy, fb, fx, _ = seg["fail"]
    fig.add_scatter(x=[b + w for b, w in zip(fb, fx)], y=fy, mode="markers",
                    marker=dict(symbol="x-thin", size=18, line=dict(width=3.5, color=BLACK)),
                    name="failed", showlegend=False, hoverinfo="skip")
    y, b, x, h = seg["whole"]
    fig.add_bar(y=y, base=b, x=x, name=names["whole"], marker=dict(color=colors["whole"], line=dict(width=0)),
                hovertext=h, showlegend=bool(y), **bar)
    if show_tokens is None:  # ticks read well only when they are far enough apart
        per_req = max((len(r.chunk_times) for r in recs), default=0)
        show_tokens = 0 < per_req <= 40 and n <= 40
    if show_tokens and tick_x:
        fig.add_scatter(x=tick_x, y=tick_y, mode="markers", name="token arrivals",
                        marker=dict(symbol="line-ns", size=14 if n <= 20 else 9,
                                    line=dict(width=1.5, color="rgba(255,255,255,0.85)")),
                        hoverinfo="skip", showlegend=False)
    if in_flight:
        fig.add_vline(x=now, line=dict(color=MUTED, dash="dot", width=2),
                      annotation=dict(text="now", font=dict(color=MUTED)), annotation_position="top")
    row_px = 34 if n <= 12 else 24 if n <= 40 else 14
    fig.update_layout(
        barmode="overlay", showlegend=True,
        xaxis=dict(title="Time since the run started (s)", showgrid=True, rangemode="tozero"),
        yaxis=dict(title="Request", showgrid=False, type="category", categoryorder="array",
                   categoryarray=rows, autorange="reversed",
                   tickfont=dict(size=BASE_SIZE - (2 if n <= 12 else 4 if n <= 40 else 6))),
    )
    peak = stats.peak_in_flight(recs)
    if recs and len(fy) == len(recs):  # nothing was answered: no batching to show, only that and why
        title = f"Request timeline: all {len(recs)} requests failed"
        cap = "No request was answered; each grey bar runs from its send to its failure (hover a bar for why)."
    elif peak > 1 and not streaming:
        title = f"Request timeline: up to {peak} requests at once"
        cap = (f"Each bar is one request from send to finish; up to {peak} were in flight together, "
               f"but without streaming there is no first-token time to show inside each bar.")
    elif peak <= 1:
        title = "Request timeline: one request at a time"
        cap = ("Each bar is one request from send to finish: the bars follow one another, so every "
               "request waits for all the ones before it.")
    else:
        title = f"Request timeline: up to {peak} requests in flight"
        cap = (f"Each bar is one request from send to last token: orange is waiting for the first "
               f"token, blue is generating; up to {peak} bars overlap in time because vLLM decodes "
               f"them together in one running batch (continuous batching).")
    if in_flight:
        cap += f" {in_flight} still in flight, drawn up to now."
    if fy and len(fy) < len(recs):
        cap += f" {len(fy)} failed (grey, ✕; hover a bar for why)."
    return _finish(fig, title, cap, placeholder=placeholder, height=min(1000, max(400, row_px * n + 200)))


# -- throughput over time ---------------------------------------------------------------------------

def throughput_over_time(runs: RunResult | Sequence[RunResult], bucket_s: float = 1.0) -> go.Figure:
    """Output tokens/s in `bucket_s` buckets (one step line per run; average in the legend)."""
    runs = [runs] if isinstance(runs, RunResult) else list(runs)
    fig = go.Figure()
    avgs = []
    colors = _colors(runs)
    for i, run in enumerate(runs):
        series = stats.tokens_per_second_series(run.records, bucket_s)
        if not series:
            continue
        starts = [t for t, _ in series]
        tokens = [v * bucket_s for _, v in series]
        # The last bucket is usually cut short by the end of the run: divide its tokens by the time
        # it really covers (a short tail joins the bucket before), so the line does not fake a drop.
        last_tok = max((t for r in run.measured for t in r.chunk_times[-1:] + [r.end_time or 0.0]), default=0.0)
        stop = max(min(starts[-1] + bucket_s, max(run.duration, last_tok)), starts[-1] + 1e-9)
        if stop - starts[-1] < 0.3 * bucket_s and len(starts) > 1:
            tokens[-2] += tokens.pop()
            starts.pop()
        edges = starts + [stop]
        rates = [tok / (edges[k + 1] - edges[k]) for k, tok in enumerate(tokens)]
        xs = edges
        ys = rates + [rates[-1]]
        out_tok = _summary(run).get("total_output_tokens") or sum(r.output_tokens for r in run.measured if r.ok)
        avg = out_tok / run.duration if run.duration else 0.0
        avgs.append((run, avg, max(v for _, v in series)))
        color = colors[i] if len(runs) > 1 else BLUE
        fig.add_scatter(
            x=xs, y=ys, mode="lines", line=dict(shape="hv", width=3.5, color=color, dash=DASHES[i % len(DASHES)]),
            fill="tozeroy" if len(runs) == 1 else None,
            fillcolor="rgba(0,114,178,0.15)" if len(runs) == 1 else None,
            name=f"{_esc(_label(run))} (avg {avg:,.0f} tok/s)",
            hovertemplate="%{x:.1f}-%{customdata:.1f} s: %{y:,.0f} tok/s<extra></extra>",
            customdata=xs[1:] + [xs[-1]],
        )
    fig.update_layout(xaxis=dict(title="Time since the run started (s)", rangemode="tozero"),
                      yaxis=dict(title="Output tokens / s", rangemode="tozero"), showlegend=True)
    unit = "1 s" if bucket_s == 1 else f"{bucket_s:g} s"
    if len(avgs) == 1:
        run, avg, peak = avgs[0]
        cap = (f"Tokens generated per second, in {unit} buckets: {peak:,.0f} tok/s at the peak, "
               f"{avg:,.0f} tok/s on average over the whole run (output tokens ÷ wall time).")
    elif avgs:
        best = max(avgs, key=lambda a: a[1])
        cap = (f"Tokens generated per second, in {unit} buckets; {_label(best[0])} sustains the most "
               f"({best[1]:,.0f} tok/s on average).")
    else:
        cap = "No tokens received yet."
    return _finish(fig, "Output tokens per second", cap, height=480)


# -- step 4: tuning ---------------------------------------------------------------------------------

def _kv_label(run: RunResult) -> str:
    kv = (run.extra or {}).get("kv_cache_tokens")
    if not kv:
        return ""
    return f"KV cache {kv / 1e6:.2f} M tok" if kv >= 1e6 else f"KV cache {kv / 1e3:.0f} k tok"


def tuning_compare(runs: Sequence[RunResult]) -> go.Figure:
    """Two panels side by side: output throughput (tok/s) and wall time per config, values on the
    bars, KV-cache capacity under each label when known."""
    runs = list(runs)
    differ_keys = [k for k in ("max_tokens", "concurrency", "request_rate")
                   if len({str(r.load.get(k)) for r in runs}) > 1]
    cats = []
    for run in runs:
        lab = _wrap(_esc(_label(run)), 20)
        notes = [_kv_label(run)] + [f"{k} {run.load.get(k)}" for k in differ_keys if run.load.get(k) is not None]
        notes = [x for x in notes if x]
        if notes:
            lab += "".join(f"<br><span style='font-size:{BASE_SIZE - 3}px;color:{MUTED}'>{x}</span>" for x in notes)
        cats.append(lab)
    tput = []
    for run in runs:
        s = _summary(run)
        v = s.get("output_throughput")
        if v is None:
            v = sum(r.output_tokens for r in run.measured if r.ok) / run.duration if run.duration else 0.0
        tput.append(v)
    wall = [float(run.duration) for run in runs]
    colors = _colors(runs)
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.12,
                        subplot_titles=("Throughput (higher is better)", "Wall time (lower is better)"))
    fig.add_bar(x=cats, y=tput, marker_color=colors, text=[f"<b>{v:,.0f}</b>" for v in tput],
                textposition="outside", cliponaxis=False, showlegend=False, name="throughput",
                hovertemplate="%{y:,.0f} tok/s<extra></extra>", row=1, col=1)
    fig.add_bar(x=cats, y=wall, marker_color=colors, text=[f"<b>{v:.1f} s</b>" for v in wall],
                textposition="outside", cliponaxis=False, showlegend=False, name="wall time",
                hovertemplate="%{y:.2f} s<extra></extra>", row=1, col=2)
    fig.update_yaxes(title_text="Output tokens / s", range=[0, max(tput or [1]) * 1.2 or 1], row=1, col=1)
    fig.update_yaxes(title_text="Wall time (s)", range=[0, max(wall or [1]) * 1.2 or 1], row=1, col=2)
    fig.update_xaxes(tickfont=dict(size=BASE_SIZE - 2), type="category")
    fig.update_annotations(font=dict(size=BASE_SIZE + 1))
    fig.update_layout(bargap=0.35)
    if len(runs) >= 2 and tput[0]:
        parts = [f"{_label(r)} {(v / tput[0] - 1) * 100:+.0f}%" for r, v in zip(runs[1:], tput[1:])]
        cap = f"Throughput compared with {_label(runs[0])}: " + ", ".join(parts) + "."
    elif runs:
        cap = f"{_label(runs[0])}: {tput[0]:,.0f} tok/s, {wall[0]:.1f} s wall time."
    else:
        cap = "No runs to compare yet."
    differ = []
    for key, name in (("max_tokens", "max_tokens"), ("concurrency", "concurrency")):
        vals = {str(r.load.get(key)) for r in runs if r.load.get(key) is not None}
        if len(vals) > 1:
            differ.append(f"{name} ({' vs '.join(sorted(vals))})")
    nreq = {len(r.measured) for r in runs}
    if len(nreq) > 1:
        differ.append(f"request count ({' vs '.join(map(str, sorted(nreq)))})")
    if differ:
        cap += " Careful: the runs also differ in " + ", ".join(differ) + ", not only in the server config."
    return _finish(fig, "Tuning: throughput and wall time per config", cap, height=540)


# -- step 5: streaming ------------------------------------------------------------------------------

def _pick_record(run: RunResult, index: int | None) -> RequestRecord | None:
    recs = run.measured
    if index is not None:
        for r in recs:
            if r.index == index:
                return r
        raise KeyError(f"no request with index {index} in run {run.id}")
    ok = [r for r in recs if r.ok]
    return max(ok, key=lambda r: (len(r.chunk_times), r.output_tokens), default=None)


def token_timeline(run_or_record: RunResult | RequestRecord, index: int | None = None) -> go.Figure:
    """Tokens received vs time since the request was sent, with TTFT and total-time lines, and
    (dotted) what the user would see without streaming. Given a run, shows request `index` or the
    completed request with the most chunks."""
    placeholder = False
    if isinstance(run_or_record, RunResult):
        placeholder = is_placeholder(run_or_record)
        r = _pick_record(run_or_record, index)
    else:
        r = run_or_record
    fig = go.Figure()
    if r is None or r.end_time is None:
        return _finish(fig, "Streaming: tokens over time", "No finished request to show yet.", height=460)
    t0 = r.send_time
    arrivals = stats.token_arrivals(r)
    xs, ys, acc = [0.0], [0.0], 0.0
    for t, k in arrivals:
        xs.append(t - t0)
        ys.append(acc)
        acc += k
        xs.append(t - t0)
        ys.append(acc)
    total = r.end_time - t0
    ttft = r.ttft if r.ttft is not None else total
    ntok = acc
    fig.add_vrect(x0=0, x1=ttft, fillcolor=WAIT_COLOR, opacity=0.18, line_width=0, layer="below")
    fig.add_scatter(x=[0, total, total], y=[0, 0, ntok], mode="lines", name="without streaming",
                    line=dict(color=VERMILLION, dash="dot", width=4), hoverinfo="skip")
    if r.chunk_times:
        fig.add_annotation(x=total * 0.55, y=0, yshift=4, text="without streaming: nothing to read yet",
                           showarrow=False, yanchor="bottom", font=dict(color=VERMILLION, size=BASE_SIZE - 2))
    fig.add_scatter(x=xs, y=ys, mode="lines", name="with streaming", line=dict(color=GREEN, width=4),
                    fill="tozeroy", fillcolor="rgba(0,158,115,0.15)",
                    hovertemplate="%{x:.2f} s: %{y:.0f} tokens<extra></extra>")
    fig.add_vline(x=ttft, line=dict(color=ORANGE, dash="dash", width=3),
                  annotation=dict(text=f"first token {_fmt_s(ttft)}", font=dict(color="#a66f00"),
                                  xanchor="left", yanchor="top"), annotation_position="top right")
    fig.add_vline(x=total, line=dict(color=BLUE, dash="dash", width=2), layer="below",
                  annotation=dict(text=f"done {_fmt_s(total)}", font=dict(color=BLUE),
                                  xanchor="right", yanchor="top"), annotation_position="top left")
    fig.update_layout(
        xaxis=dict(title="Time since the request was sent (s)", range=[0, total * 1.04 or 1]),
        yaxis=dict(title="Tokens received", range=[-ntok * 0.03, ntok * 1.18 or 1], zeroline=False),
        legend=dict(traceorder="reversed"),
    )
    if r.chunk_times:
        title = f"Streaming: text after {_fmt_s(ttft)}, not {_fmt_s(total)}"
        cap = (f"With streaming the first words appear after {_fmt_s(ttft)} and the rest flows in at "
               f"about {max(ntok - 1, 0) / max(total - ttft, 1e-9):.0f} tokens/s; without it the user "
               f"would see nothing for {_fmt_s(total)} and then all {ntok:.0f} tokens at once.")
    else:
        title = "No streaming: all text arrives at the end"
        cap = (f"This request was not streamed, so all {ntok:.0f} tokens arrive together after "
               f"{_fmt_s(total)}.")
    return _finish(fig, title, cap, placeholder=placeholder, height=480)


# -- sweeps -----------------------------------------------------------------------------------------

def _concurrency(run: RunResult) -> float | None:
    for v in (run.load.get("concurrency"), run.load.get("max_concurrency"), _summary(run).get("max_concurrency")):
        if v:
            return float(v)
    return None


def _label_sides(ys: Sequence[float | None]) -> list[str]:
    """Value labels above each point, on the side the line does not come from: top left where the
    curve rises into the point, top right where it falls into it (the label would sit on the line)."""
    out = []
    for k, y in enumerate(ys):
        prev = ys[k - 1] if k else None
        out.append("top right" if prev is not None and y is not None and prev > y else "top left")
    return out


def sweep_chart(runs: Sequence[RunResult]) -> go.Figure:
    """Output throughput and median TTFT vs concurrency, two panels side by side. Runs are grouped
    into lines by run.extra["series"] (default: run.scenario)."""
    groups: dict[str, list[tuple[float, RunResult]]] = {}
    for run in runs:
        c = _concurrency(run)
        if c is None:
            continue
        groups.setdefault(str(run.extra.get("series") or run.scenario), []).append((c, run))
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.13,
                        subplot_titles=("Throughput (higher is better)", "Median TTFT (lower is better)"))
    allc: list[float] = []
    first_last = None
    for i, (name, pts) in enumerate(groups.items()):
        pts.sort(key=lambda p: p[0])
        cs = [c for c, _ in pts]
        allc += cs
        tp = [_summary(r).get("output_throughput") for _, r in pts]
        ttft = [_summary(r).get("median_ttft_ms") for _, r in pts]
        color = PALETTE[i % len(PALETTE)]
        show = len(groups) > 1
        common = dict(mode="lines+markers+text", line=dict(color=color, width=3.5),
                      marker=dict(size=11, color=color),
                      textfont=dict(size=BASE_SIZE - 3, color=color), cliponaxis=False, legendgroup=name)
        fig.add_scatter(x=cs, y=tp, name=_esc(name), showlegend=show, text=[_fmt_num(v) for v in tp],
                        hovertemplate="concurrency %{x:.0f}: %{y:,.0f} tok/s<extra>" + _esc(name) + "</extra>",
                        textposition=_label_sides(tp), row=1, col=1, **common)
        fig.add_scatter(x=cs, y=ttft, name=_esc(name), showlegend=False, text=[_fmt_num(v) for v in ttft],
                        hovertemplate="concurrency %{x:.0f}: %{y:,.0f} ms<extra>" + _esc(name) + "</extra>",
                        textposition=_label_sides(ttft), row=1, col=2, **common)
        if first_last is None and len(pts) >= 2:
            first_last = (cs[0], cs[-1], tp[0], tp[-1], ttft[0], ttft[-1])
    xaxis = dict(title_text="Concurrent requests")
    if allc and min(allc) > 0 and max(allc) / min(allc) >= 8:
        ticks = sorted(set(allc))
        xaxis.update(type="log", tickvals=ticks, ticktext=[f"{c:g}" for c in ticks])
    fig.update_xaxes(**xaxis)
    fig.update_yaxes(title_text="Output tokens / s", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text="Median TTFT (ms)", rangemode="tozero", row=1, col=2)
    fig.update_annotations(font=dict(size=BASE_SIZE + 1))
    if first_last and None not in first_last:
        c0, c1, t0, t1, f0, f1 = first_last
        cap = (f"From {c0:g} to {c1:g} concurrent requests throughput grows from {t0:,.0f} to "
               f"{t1:,.0f} tok/s while the median wait for the first token goes from {f0:,.0f} to "
               f"{f1:,.0f} ms: more users per GPU, each waiting a little longer.")
    else:
        cap = "Throughput and median time to first token for each concurrency level."
    return _finish(fig, "Concurrency sweep", cap, height=520)


# -- telemetry --------------------------------------------------------------------------------------
# The Monitor redraws these two charts every 2 s while a benchmark runs, so they are built as plain
# dicts and validated once by go.Figure(...): plotly's make_subplots / add_scatter(row=) /
# update_*axes validate every property they touch, which made one build ~10x slower (~200 ms on a
# 2-core VM) and was most of what a Monitor viewer cost the app. Values are rounded to what can be
# read off them (0.01 s, 1 MB, 0.1 %, 0.1 tok/s): the JSON sent to every viewer is half as long.

# Plot-area width the event labels are laid out for: a chart beside the sidebar on a 1400 px screen
# (narrower than a projector's, so labels that fit here fit there).
PLOT_PX = 820


@functools.lru_cache(maxsize=8)
def _stacked_panels(rows: int, spacing: float) -> dict[str, Any]:
    """The layout of `rows` panels stacked on one shared time axis, each with a title slot; without
    plotly's default template, which _finish replaces anyway and which is most of the dict."""
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
        notes.append(dict(x=t, y=1 - level_step * lvl, xref="x", yref="y domain", text=_esc(label), showarrow=False,
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
                           showlegend=False, hovertemplate="%{x:.0f} s: %{y:.1f} GB<extra>" + _esc(name) + "</extra>",
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
    return _finish(fig, title, cap, height=300 + 230 * nrows if nrows > 1 else 480)


def _rgba(hex_color: str, alpha: float) -> str:
    h = hex_color.lstrip("#")
    return f"rgba({int(h[0:2], 16)},{int(h[2:4], 16)},{int(h[4:6], 16)},{alpha})"


_METRIC_ALIASES = {
    "running": ("running", "num_requests_running", "vllm:num_requests_running", "requests_running"),
    "waiting": ("waiting", "num_requests_waiting", "vllm:num_requests_waiting", "requests_waiting"),
    "kv": ("kv_cache_usage", "kv_cache_usage_perc", "vllm:kv_cache_usage_perc", "gpu_cache_usage_perc",
           "vllm:gpu_cache_usage_perc", "kv_cache_pct", "kv_usage"),
    "tok_s": ("gen_tok_s", "generation_tok_s", "generation_tokens_per_s", "generation_throughput",
              "tok_s", "avg_generation_throughput"),
    "tok_total": ("generation_tokens_total", "vllm:generation_tokens_total", "generation_tokens"),
}


def _get(sample: Mapping[str, Any], key: str) -> float | None:
    for k in _METRIC_ALIASES[key]:
        v = sample.get(k)
        if v is not None:
            return float(v)
    return None


def metrics_chart(samples: Sequence[Mapping[str, Any]], events: Sequence[Mapping[str, Any]] = ()) -> go.Figure:
    """vLLM /metrics over time, three stacked panels sharing the time axis: requests running and
    waiting, KV-cache usage (%), generation tokens/s (from a rate or the generation_tokens_total
    counter). Samples are dicts with a "t" and any of the usual metric names."""
    offset = _rel_times(samples, events)
    pts = sorted((s for s in samples if s.get("t") is not None), key=lambda s: s["t"])
    t = [round(float(s["t"]) - offset, 2) for s in pts]
    run = [_get(s, "running") for s in pts]
    wait = [_get(s, "waiting") for s in pts]
    kv = [_get(s, "kv") for s in pts]
    kv_vals = [v for v in kv if v is not None]
    if kv_vals and max(kv_vals) <= 1.0:
        kv = [None if v is None else v * 100 for v in kv]
    kv = [None if v is None else round(v, 1) for v in kv]
    tok = [_get(s, "tok_s") for s in pts]
    if all(v is None for v in tok):
        tot = [_get(s, "tok_total") for s in pts]
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
    return _finish(go.Figure(dict(data=traces, layout=layout)), "vLLM server metrics", cap, height=720)


# -- history ----------------------------------------------------------------------------------------

# key -> (name, unit, "higher"|"lower" is better)
METRICS: dict[str, tuple[str, str, str]] = {
    "output_throughput": ("Output throughput", "tok/s", "higher"),
    "total_token_throughput": ("Total token throughput", "tok/s", "higher"),
    "request_throughput": ("Request throughput", "req/s", "higher"),
    "request_goodput": ("Goodput", "req/s", "higher"),
    "duration": ("Wall time", "s", "lower"),
    "mean_latency_s": ("Mean latency", "s", "lower"),
    "total_output_tokens": ("Output tokens", "tokens", "higher"),
    "max_concurrency": ("Peak requests in flight", "requests", "higher"),
}
for _m, _name in (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2el", "E2E latency")):
    for _stat, _sname in (("mean", "Mean"), ("median", "Median"), ("p90", "P90"), ("p95", "P95"), ("p99", "P99")):
        METRICS[f"{_stat}_{_m}_ms"] = (f"{_sname} {_name}", "ms", "lower")


def metric_info(metric: str) -> tuple[str, str, str]:
    """(display name, unit, 'higher'|'lower' is better) for a summary key."""
    if metric in METRICS:
        return METRICS[metric]
    unit = "ms" if metric.endswith("_ms") else "s" if metric.endswith("_s") else ""
    return metric.replace("_", " "), unit, "higher" if "throughput" in metric else "lower"


def _metric_value(run: Any, metric: str) -> float | None:
    if metric == "duration":
        return float(run.duration)
    v = _summary(run).get(metric)
    return None if v is None else float(v)


def history_compare(runs: Sequence[Any], metric: str = "output_throughput") -> go.Figure:
    """One bar per saved run for one summary metric (see METRICS); accepts RunResult or store rows."""
    name, unit, better = metric_info(metric)
    pts = [(r, _metric_value(r, metric)) for r in runs]
    have = [(r, v) for r, v in pts if v is not None and not math.isnan(v)]
    missing = len(pts) - len(have)
    # the start time under each label keeps runs with the same label apart
    cats = []
    for r, _ in have:
        lab = _wrap(_esc(_label(r)), 18)
        if getattr(r, "started_at", 0):
            when = datetime.fromtimestamp(r.started_at).strftime("%b %d %H:%M")
            lab += f"<br><span style='font-size:{BASE_SIZE - 4}px;color:{MUTED}'>{when}</span>"
        cats.append(lab)
    vals = [v for _, v in have]
    colors = [_color(r, i) for i, (r, _) in enumerate(have)]
    fig = go.Figure(go.Bar(
        x=cats, y=vals, marker_color=colors, text=[f"<b>{_fmt_num(v)}</b>" for v in vals],
        textposition="outside", cliponaxis=False, showlegend=False, name=name,
        hovertemplate="%{y:,.2f} " + unit + "<extra></extra>",
    ))
    fig.update_layout(
        xaxis=dict(type="category", tickfont=dict(size=BASE_SIZE - 3 if len(cats) > 6 else BASE_SIZE - 1)),
        yaxis=dict(title=f"{name} ({unit})" if unit else name, range=[0, (max(vals) if vals else 1) * 1.18]),
        bargap=0.35,
    )
    if have:
        best_r, best_v = (max if better == "higher" else min)(have, key=lambda p: p[1])
        cap = (f"{_label(best_r)} is best at {_fmt_num(best_v)} {unit} ({better} is better).")
    else:
        cap = f"No saved run has {name} yet."
    if missing:
        cap += f" {missing} run(s) without this metric are left out."
    return _finish(fig, f"{name} by run", cap, height=520)


# -- export -----------------------------------------------------------------------------------------

def _ensure_browser() -> None:
    """kaleido 1.x drives a Chrome; point it at the system Chromium when none is configured."""
    if not os.environ.get("BROWSER_PATH"):
        for p in ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"):
            if os.path.exists(p):
                os.environ["BROWSER_PATH"] = p
                break


def to_png(fig: go.Figure, path: str | Path, width: int = 1280, height: int | None = None,
           scale: float = 1.0) -> Path:
    """Write `fig` as a PNG with kaleido (+ Chromium). If that cannot work here, write an HTML
    file beside it instead (same name, .html), warn, and return that path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    h = height or fig.layout.height or 540
    try:
        _ensure_browser()
        fig.write_image(str(path), format="png", width=width, height=h, scale=scale)
        if path.exists() and path.stat().st_size > 0:
            return path
        raise RuntimeError("kaleido wrote nothing")
    except Exception as e:  # no Chrome, kaleido missing, sandbox trouble ...
        html_path = path.with_suffix(".html")
        fig.write_html(str(html_path), include_plotlyjs=True)  # self-contained: works offline
        why = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        warnings.warn(f"PNG export failed ({why}); wrote {html_path} instead.", RuntimeWarning, stacklevel=2)
        return html_path


def to_pngs(items: Sequence[tuple[go.Figure, str | Path]], width: int = 1280, scale: float = 1.0) -> list[Path]:
    """Several PNGs with one browser start (much faster than to_png in a loop); HTML fallback."""
    items = [(f, Path(p)) for f, p in items]
    for _, p in items:
        p.parent.mkdir(parents=True, exist_ok=True)
    try:
        _ensure_browser()
        pio.write_images([f for f, _ in items], [str(p) for _, p in items], format="png", width=width,
                         height=[f.layout.height or 540 for f, _ in items], scale=scale)
        return [p for _, p in items]
    except Exception:
        return [to_png(f, p, width=width, scale=scale) for f, p in items]
