"""The requests inside one run: latency bars, the request timeline (continuous batching made visible), one
stream's tokens over time, output tokens per second. See docs/measuring.md#stats."""
from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from engine.digits import significant
from engine.figures.theme import (
    BASE_SIZE,
    BLACK,
    BLUE,
    DASHES,
    DECODE_COLOR,
    FAILED_COLOR,
    GREEN,
    INK,
    KIND_COLORS,
    MUTED,
    ORANGE,
    SKY,
    VERMILLION,
    WAIT_COLOR,
    esc,
    finish,
    is_placeholder,
    measured,
    preview,
    run_colors,
    run_label,
    short,
    summary_of,
    why_failed,
)
from engine.measure.judge import stats
from engine.messages import duration, say, translate
from engine.results.records import RequestRecord, RunResult


# -- step 3: concurrent requests --------------------------------------------------------------------

def concurrent_latency_bars(run: RunResult, *, lang: str = "en") -> go.Figure:
    """Horizontal per-request latency bars, labelled with each prompt's first 30 characters, and a
    dashed line at the run's wall time (the layout's first shape, x = run.duration)."""
    recs = measured(run)
    placeholder = is_placeholder(run)
    n = len(recs)
    labels = [f"#{k + 1}  {esc(short(r.prompt, 30))}" for k, r in enumerate(recs)]
    lat = [r.e2e if r.e2e is not None else 0.0 for r in recs]
    colors = [DECODE_COLOR if r.ok else FAILED_COLOR for r in recs]
    failed = translate(say("failed"), lang)
    text = [translate(say("{latency} s · {tokens} tok", latency=significant(v), tokens=r.output_tokens), lang)
            if r.ok else failed for v, r in zip(lat, recs)]
    hover = [f"<b>{esc(r.prompt)}</b><br>" + (
        translate(say("latency {latency} s · first token after {ttft} · {tokens} tokens",
                      latency=significant(r.e2e), ttft=duration(r.ttft or 0, lang), tokens=r.output_tokens), lang)
        if r.ok else f"{failed}<br>{why_failed(r, lang)}") + preview(r, placeholder, lang=lang)
        for r in recs]
    fig = go.Figure(go.Bar(
        y=labels, x=lat, orientation="h", marker_color=colors, name=translate(say("Latency"), lang),
        showlegend=False,
        text=text, textposition="auto", insidetextanchor="end", textangle=0,
        insidetextfont=dict(size=BASE_SIZE - 2, color="white"),
        outsidetextfont=dict(size=BASE_SIZE - 2, color=INK), cliponaxis=False,
        hovertext=hover, hoverinfo="text",
    ))
    wall = float(run.duration)
    ok = [r.e2e for r in recs if r.ok and r.e2e is not None]
    serial = sum(ok)
    avg = serial / len(ok) if ok else 0.0
    said = dict(wall=significant(wall), avg=significant(avg), serial=significant(serial))  # the captions' numbers
    fig.add_vline(x=wall, line=dict(color=BLACK, dash="dash", width=2.5),
                  annotation=dict(text=translate(say("wall time {wall} s", wall=said["wall"]), lang),
                                  font=dict(size=BASE_SIZE - 1),
                                  yanchor="bottom", xanchor="right"),
                  annotation_position="top right")
    xmax = max([wall, *lat]) if lat else wall
    fig.update_layout(
        xaxis=dict(title=translate(say("Latency (s)"), lang), showgrid=True, range=[0, xmax * 1.12 if xmax else 1]),
        yaxis=dict(showgrid=False, autorange="reversed", type="category", categoryorder="array",
                   categoryarray=labels, tickfont=dict(size=BASE_SIZE - 2)),
        bargap=0.3, margin=dict(t=120),
    )
    nfail = sum(1 for r in recs if not r.ok)
    if nfail == n:  # nothing was answered: no batching to show, only that and why
        title = say("{count} requests at once: all {count} failed", count=n)
        cap = [say("No request was answered; each grey bar ends when it failed (hover a bar for why).")]
    elif nfail:
        title = say("{count} requests at once: {done} done, {failed} failed in {wall} s",
                    count=n, done=n - nfail, failed=nfail, wall=said["wall"])
        cap = [say("The {done} requests that succeeded were in flight together and finished within {wall} s "
                   "of wall time (average latency {avg} s); served one after another they would have taken "
                   "about {serial} s, the serial sum of their latencies.",
                   done=n - nfail, **said),
               say("{failed} failed (grey; hover a bar for why).", failed=nfail)]
    elif stats.peak_in_flight(recs) <= 1:  # e.g. the naive-vs-vLLM step: no batching to claim
        title = say("{count} requests one after another: all done in {wall} s", count=n, wall=said["wall"])
        cap = [say("Each request waited for the one before it, so the wall time ({wall} s) is the sum of their "
                   "latencies (average {avg} s): nothing was batched. Send them at once to see continuous "
                   "batching.", wall=said["wall"], avg=said["avg"])]
    elif (peak := stats.peak_in_flight(recs)) < n:  # a limit on requests in flight, or turns of conversations
        title = say("{count} requests, up to {peak} at once: all done in {wall} s", count=n, peak=peak,
                    wall=said["wall"])
        cap = [say("Up to {peak} of the {done} requests were in flight together, and all finished within {wall} s "
                   "of wall time (average latency {avg} s); served one after another they would have taken about "
                   "{serial} s, the serial sum of their latencies.", peak=peak, done=n, **said)]
    else:
        title = say("{count} requests at once: all done in {wall} s", count=n, wall=said["wall"])
        cap = [say("All {done} requests were in flight together and finished within {wall} s of wall time "
                   "(average latency {avg} s); served one after another they would have taken about "
                   "{serial} s, the serial sum of their latencies.", done=n, **said)]
    return finish(fig, title, cap, placeholder=placeholder, height=max(420, 46 * n + 190), lang=lang)


# -- continuous batching made visible ---------------------------------------------------------------

def request_timeline(run: RunResult, now: float | None = None, show_tokens: bool | None = None, *,
                     lang: str = "en") -> go.Figure:
    """One horizontal bar per request from send to finish: orange while waiting for the first
    token (queue + prefill), blue while generating. A finished request with no first-token time
    (not streamed, e.g. the naive baseline) is one bar in its run's colour. Traces, in order:
    0 "wait", 1 "decode", 2 "failed" bars, 3 failed ✕ markers, 4 "not streamed" bars, then token
    ticks when shown. Requests still in flight (end_time None) are drawn up to `now` (seconds from
    the run's start; default: the latest time seen in the records)."""
    recs = sorted(run.measured, key=lambda r: (r.send_time, r.index))
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
        head = f"<b>{row}</b> {esc(short(r.prompt, 50))}"
        if r.error is not None:
            failed = translate(say("failed after {time}", time=duration(end - r.send_time, lang)), lang)
            add("fail", row, r.send_time, end, f"{head}<br>{failed}<br>{why_failed(r, lang)}")
            continue
        first = r.first_token_time
        if first is None and (not running or not streaming):
            took = (say("running for {time} (no per-token timing)",
                        time=duration(end - r.send_time, lang)) if running else
                    say("took {time}, {tokens} tokens (no per-token timing)", time=duration(end - r.send_time, lang),
                        tokens=r.output_tokens))
            add("whole", row, r.send_time, end,
                f"{head}<br>{translate(took, lang)}" + preview(r, placeholder, lang=lang))
            continue
        wait_end = first if first is not None else end
        waited = (say("waiting for first token: {time}",
                      time=duration(wait_end - r.send_time, lang)) if first is not None
                  else say("waiting for first token: {time} (still waiting)",
                           time=duration(wait_end - r.send_time, lang)))
        add("wait", row, r.send_time, wait_end, f"{head}<br>{translate(waited, lang)}")
        if first is not None:
            tokens = r.output_tokens or len(r.chunk_times)
            if running:
                gen = translate(say("generating: {time}, {tokens} tokens (in flight)", time=duration(end - first, lang),
                                    tokens=tokens), lang)
            else:
                gen = (translate(say("generating: {time}, {tokens} tokens", time=duration(end - first, lang),
                                     tokens=tokens),
                                 lang)
                       + "<br>" + translate(say("total {time}", time=duration(end - r.send_time, lang)), lang))
            add("dec", row, first, end, f"{head}<br>{gen}" + preview(r, placeholder, lang=lang))
        tick_x += r.chunk_times
        tick_y += [row] * len(r.chunk_times)
    n = len(recs)
    bar = dict(orientation="h", hoverinfo="text", width=0.72)
    fig = go.Figure()
    names = {k: translate(v, lang) for k, v in (
        ("wait", say("waiting for 1st token (queue + prefill)")), ("dec", say("generating tokens (decode)")),
        ("fail", say("failed")), ("whole", say("whole request (not streamed)")))}
    colors = {"wait": WAIT_COLOR, "dec": DECODE_COLOR, "fail": FAILED_COLOR,
              "whole": KIND_COLORS.get(run.kind, VERMILLION) if run.kind != "vllm" else SKY}
    for kind in ("wait", "dec", "fail"):
        y, b, x, h = seg[kind]
        fig.add_bar(y=y, base=b, x=x, name=names[kind], marker=dict(color=colors[kind], line=dict(width=0)),
                    hovertext=h, showlegend=bool(y), **bar)
    fy, fb, fx, _ = seg["fail"]
    fig.add_scatter(x=[b + w for b, w in zip(fb, fx)], y=fy, mode="markers",
                    marker=dict(symbol="x-thin", size=18, line=dict(width=3.5, color=BLACK)),
                    name=names["fail"], showlegend=False, hoverinfo="skip")
    y, b, x, h = seg["whole"]
    fig.add_bar(y=y, base=b, x=x, name=names["whole"], marker=dict(color=colors["whole"], line=dict(width=0)),
                hovertext=h, showlegend=bool(y), **bar)
    if show_tokens is None:  # ticks read well only when they are far enough apart
        per_req = max((len(r.chunk_times) for r in recs), default=0)
        show_tokens = 0 < per_req <= 40 and n <= 40
    if show_tokens and tick_x:
        fig.add_scatter(x=tick_x, y=tick_y, mode="markers", name=translate(say("token arrivals"), lang),
                        marker=dict(symbol="line-ns", size=14 if n <= 20 else 9,
                                    line=dict(width=1.5, color="rgba(255,255,255,0.85)")),
                        hoverinfo="skip", showlegend=False)
    if in_flight:
        fig.add_vline(x=now, line=dict(color=MUTED, dash="dot", width=2),
                      annotation=dict(text=translate(say("now"), lang), font=dict(color=MUTED)),
                      annotation_position="top")
    row_px = 34 if n <= 12 else 24 if n <= 40 else 14
    fig.update_layout(
        barmode="overlay", showlegend=True,
        xaxis=dict(title=translate(say("Time since the run started (s)"), lang), showgrid=True, rangemode="tozero"),
        yaxis=dict(title=translate(say("Request"), lang), showgrid=False, type="category", categoryorder="array",
                   categoryarray=rows, autorange="reversed",
                   tickfont=dict(size=BASE_SIZE - (2 if n <= 12 else 4 if n <= 40 else 6))),
    )
    peak = stats.peak_in_flight(recs)
    if recs and len(fy) == len(recs):  # nothing was answered: no batching to show, only that and why
        title = say("Request timeline: all {count} requests failed", count=len(recs))
        cap = [say("No request was answered; each grey bar runs from its send to its failure (hover a bar for why).")]
    elif peak > 1 and not streaming:
        title = say("Request timeline: up to {peak} requests at once", peak=peak)
        cap = [say("Each bar is one request from send to finish; up to {peak} were in flight together, "
                   "but without streaming there is no first-token time to show inside each bar.", peak=peak)]
    elif peak <= 1:
        title = say("Request timeline: one request at a time")
        cap = [say("Each bar is one request from send to finish: the bars follow one another, so every "
                   "request waits for all the ones before it.")]
    else:
        title = say("Request timeline: up to {peak} requests in flight", peak=peak)
        cap = [say("Each bar is one request from send to last token: orange is waiting for the first "
                   "token, blue is generating; up to {peak} bars overlap in time because vLLM decodes "
                   "them together in one running batch (continuous batching).", peak=peak)]
    if in_flight:
        cap.append(say("{count} still in flight, drawn up to now.", count=in_flight))
    if fy and len(fy) < len(recs):
        cap.append(say("{count} failed (grey, ✕; hover a bar for why).", count=len(fy)))
    return finish(fig, title, cap, placeholder=placeholder, height=min(1000, max(400, row_px * n + 200)), lang=lang)


# -- throughput over time ---------------------------------------------------------------------------

def throughput_over_time(runs: RunResult | Sequence[RunResult], bucket_s: float = 1.0, *,
                         lang: str = "en") -> go.Figure:
    """Output tokens/s in `bucket_s` buckets (one step line per run; average in the legend)."""
    runs = [runs] if isinstance(runs, RunResult) else list(runs)
    fig = go.Figure()
    avgs = []
    colors = run_colors(runs)
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
            tail = tokens.pop()  # popped first: `tokens[-2] += tokens.pop()` indexes a list one shorter
            tokens[-1] += tail
            starts.pop()
        edges = starts + [stop]
        rates = [tok / (edges[k + 1] - edges[k]) for k, tok in enumerate(tokens)]
        xs = edges
        ys = rates + [rates[-1]]
        out_tok = summary_of(run).get("total_output_tokens") or sum(r.output_tokens for r in run.measured if r.ok)
        avg = out_tok / run.duration if run.duration else 0.0
        avgs.append((run, avg, max(v for _, v in series)))
        color = colors[i] if len(runs) > 1 else BLUE
        fig.add_scatter(
            x=xs, y=ys, mode="lines", line=dict(shape="hv", width=3.5, color=color, dash=DASHES[i % len(DASHES)]),
            fill="tozeroy" if len(runs) == 1 else None,
            fillcolor="rgba(0,114,178,0.15)" if len(runs) == 1 else None,
            name=translate(say("{run} (avg {avg} tok/s)", run=esc(run_label(run, lang)), avg=significant(avg)), lang),
            hovertemplate=translate(say("{x}-{end} s: {y} tok/s", x="%{x:.1f}", end="%{customdata:.1f}",
                                        y="%{y:,.0f}"), lang) + "<extra></extra>",
            customdata=xs[1:] + [xs[-1]],
        )
    fig.update_layout(xaxis=dict(title=translate(say("Time since the run started (s)"), lang), rangemode="tozero"),
                      yaxis=dict(title=translate(say("Output tokens / s"), lang), rangemode="tozero"), showlegend=True)
    unit = say("{seconds} s", seconds=f"{bucket_s:g}")
    if len(avgs) == 1:
        run, avg, peak = avgs[0]
        cap = say("Tokens generated per second, in {bucket} buckets: {peak} tok/s at the peak, "
                  "{avg} tok/s on average over the whole run (output tokens ÷ wall time).",
                  bucket=unit, peak=significant(peak), avg=significant(avg))
    elif avgs:
        best = max(avgs, key=lambda a: a[1])
        cap = say("Tokens generated per second, in {bucket} buckets; {run} sustains the most "
                  "({avg} tok/s on average).", bucket=unit, run=run_label(best[0], lang), avg=significant(best[1]))
    else:
        cap = say("No tokens received yet.")
    return finish(fig, say("Output tokens per second"), cap, height=480, lang=lang)


# -- step 5: streaming ------------------------------------------------------------------------------

def token_timeline(run_or_record: RunResult | RequestRecord, *, lang: str = "en") -> go.Figure:
    """Tokens received vs time since the request was sent, with TTFT and total-time lines, and
    (dotted) what the user would see without streaming. Given a run, shows its completed request with the most
    chunks."""
    placeholder = False
    r: RequestRecord | None
    if isinstance(run_or_record, RunResult):
        placeholder = is_placeholder(run_or_record)
        r = max((x for x in run_or_record.measured if x.ok), key=lambda x: (len(x.chunk_times), x.output_tokens),
                default=None)
    else:
        r = run_or_record
    fig = go.Figure()
    if r is None or r.end_time is None:
        return finish(fig, say("Streaming: tokens over time"), say("No finished request to show yet."), height=460,
                      lang=lang)
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
    fig.add_scatter(x=[0, total, total], y=[0, 0, ntok], mode="lines", name=translate(say("without streaming"), lang),
                    line=dict(color=VERMILLION, dash="dot", width=4), hoverinfo="skip")
    if r.chunk_times:
        fig.add_annotation(x=total * 0.55, y=0, yshift=4,
                           text=translate(say("without streaming: nothing to read yet"), lang),
                           showarrow=False, yanchor="bottom", font=dict(color=VERMILLION, size=BASE_SIZE - 2))
    fig.add_scatter(x=xs, y=ys, mode="lines", name=translate(say("with streaming"), lang),
                    line=dict(color=GREEN, width=4), fill="tozeroy", fillcolor="rgba(0,158,115,0.15)",
                    hovertemplate=translate(say("{x} s: {y} tokens", x="%{x:.2f}", y="%{y:.0f}"), lang)
                    + "<extra></extra>")
    fig.add_vline(x=ttft, line=dict(color=ORANGE, dash="dash", width=3),
                  annotation=dict(text=translate(say("first token {time}", time=duration(ttft, lang)), lang),
                                  font=dict(color="#a66f00"),
                                  xanchor="left", yanchor="top"), annotation_position="top right")
    fig.add_vline(x=total, line=dict(color=BLUE, dash="dash", width=2), layer="below",
                  annotation=dict(text=translate(say("done {time}", time=duration(total, lang)), lang),
                                  font=dict(color=BLUE),
                                  xanchor="right", yanchor="top"), annotation_position="top left")
    fig.update_layout(
        xaxis=dict(title=translate(say("Time since the request was sent (s)"), lang), range=[0, total * 1.04 or 1]),
        yaxis=dict(title=translate(say("Tokens received"), lang), range=[-ntok * 0.03, ntok * 1.18 or 1],
                   zeroline=False),
        legend=dict(traceorder="reversed"),
    )
    if r.chunk_times:
        title = say("Streaming: text after {ttft}, not {total}", ttft=duration(ttft, lang), total=duration(total, lang))
        cap = say("With streaming the first words appear after {ttft} and the rest flows in at "
                  "about {rate} tokens/s; without it the user would see nothing for {total} and then all "
                  "{tokens:.0f} tokens at once.", ttft=duration(ttft, lang),
                  rate=significant(max(ntok - 1, 0) / max(total - ttft, 1e-9)),
                  total=duration(total, lang), tokens=ntok)
    else:
        title = say("No streaming: all text arrives at the end")
        cap = say("This request was not streamed, so all {tokens:.0f} tokens arrive together after {total}.",
                  tokens=ntok, total=duration(total, lang))
    return finish(fig, title, cap, placeholder=placeholder, height=480, lang=lang)
