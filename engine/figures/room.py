"""The room's round (engine/room.py): the attendees' requests on one clock, who joined whose answer mid-generation
and how many generated together; then the same requests one at a time, each person's wait both ways.
See docs/measuring.md#joins."""
from __future__ import annotations

import statistics

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from engine.figures.theme import (
    BASE_SIZE,
    BLUE,
    DECODE_COLOR,
    FAILED_COLOR,
    MUTED,
    VERMILLION,
    WAIT_COLOR,
    Bars,
    esc,
    finish,
    is_placeholder,
)
from engine.measure.judge.joins import first_joins, sharing
from engine.digits import significant
from engine.messages import duration, say, say_n, seconds, translate
from engine.results.records import RequestRecord, RunResult

MAX_TICKS = 40  # token ticks per request beyond which they blur into the bar


def _names(run: RunResult) -> dict[int, str]:
    """Each request's attendee by its index ('#3' where the run does not name them)."""
    names = run.extra.room.attendees or []
    return {r.index: str(names[r.index]) if r.index < len(names) else f"#{r.index + 1}" for r in run.records}


def _end(r: RequestRecord, now: float) -> float:
    return r.end_time if r.end_time is not None else now


def _last_end(recs: list[RequestRecord]) -> float:
    return max((t for r in recs if (t := r.end_time) is not None), default=0.0)


def room_timeline(run: RunResult, now: float | None = None, *, lang: str = "en") -> go.Figure:
    """Above, one row per attendee in the order they pressed: orange from the press to the first token, blue while
    the answer streams (its tokens as ticks), the row's label their name and TTFT, and beside the bar whose answer
    it joined mid-generation and at which token. Below, how many requests were generating when each token came
    out. Requests still streaming are drawn up to `now` (s from the first press)."""
    recs = sorted(run.records, key=lambda r: (r.send_time, r.index))
    names = _names(run)
    if now is None:
        now = max((t for r in recs for t in (r.send_time, r.end_time, *r.chunk_times[-1:]) if t is not None),
                  default=0.0)
    # every row's tokens as ticks, or none: a row without them beside rows with them reads as a different answer
    ticked = all(len(r.chunk_times) <= MAX_TICKS for r in recs)
    joined = first_joins(recs)
    share = sharing(recs)
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.78, 0.22], vertical_spacing=0.06)
    rows = [f"{esc(names[r.index])} · {duration(r.ttft, lang) if r.ttft is not None else '…'}" for r in recs]
    wait, gen, fail = Bars(), Bars(), Bars()
    ticks_x, ticks_y, join_x, join_y, join_text = [], [], [], [], []
    for row, r in zip(rows, recs):
        end = _end(r, now)
        who = f"<b>{esc(names[r.index])}</b>"
        if r.error is not None:
            fail.add(row, r.send_time, end - r.send_time, who + "<br>" + esc(translate(say(
                "failed after {time}", time=duration(end - r.send_time, lang)), lang)))
            continue
        first = r.first_token_time if r.first_token_time is not None else end
        wait.add(row, r.send_time, max(first - r.send_time, 0.0), who + "<br>" + translate(
            say("waiting for first token: {time}", time=duration(first - r.send_time, lang)), lang))
        if r.first_token_time is None:
            continue
        tokens = r.output_tokens or len(r.chunk_times)
        gen.add(row, first, max(end - first, 0.0), who + "<br>" + translate(
            say("generating: {time}, {tokens} tokens", time=duration(end - first, lang), tokens=tokens), lang))
        if ticked:
            ticks_x += r.chunk_times
            ticks_y += [row] * len(r.chunk_times)
        if (j := joined.get(r.index)) is not None:
            join_x.append(end)
            join_y.append(row)
            join_text.append(translate(say("joined at {name}'s token {k}", name=esc(names[j.early]), k=j.at_token),
                                       lang))
    bar = dict(orientation="h", hoverinfo="text", width=0.72)
    for bars, name, color in (
            (wait, say("waiting for 1st token (queue + prefill)"), WAIT_COLOR),
            (gen, say("generating tokens (decode)"), DECODE_COLOR), (fail, say("failed"), FAILED_COLOR)):
        fig.add_bar(y=bars.y, base=bars.base, x=bars.x, hovertext=bars.hover, name=translate(name, lang),
                    showlegend=bool(bars.y), marker=dict(color=color, line=dict(width=0)), row=1, col=1, **bar)
    if ticks_x:
        fig.add_scatter(x=ticks_x, y=ticks_y, mode="markers", hoverinfo="skip", showlegend=False,
                        marker=dict(symbol="line-ns", size=12 if len(recs) <= 20 else 8,
                                    line=dict(width=1.2, color="rgba(255,255,255,0.85)")), row=1, col=1)
    fig.add_scatter(x=join_x, y=join_y, mode="text", text=[f"  ↳ {t}" for t in join_text], textposition="middle right",
                    textfont=dict(size=BASE_SIZE - 3 if len(recs) <= 20 else BASE_SIZE - 6, color=VERMILLION),
                    hoverinfo="skip", showlegend=False, cliponaxis=False, row=1, col=1)
    fig.add_scatter(x=share.times, y=share.counts, mode="lines", line=dict(shape="hv", width=2.5, color=BLUE),
                    fill="tozeroy", fillcolor="rgba(0,114,178,0.15)", showlegend=False,
                    name=translate(say("generating together"), lang),
                    hovertemplate=translate(say("{n} generating together", n="%{y}"), lang) + "<extra></extra>",
                    row=2, col=1)
    if any(r.end_time is None for r in recs):
        fig.add_vline(x=now, line=dict(color=MUTED, dash="dot", width=2))
    widest = max((len(t) for t in join_text), default=0)
    right = max([now, *(_end(r, now) for r in recs)], default=1.0) or 1.0
    fig.update_xaxes(range=[0, right * (1.08 + 0.014 * widest)])  # room for the join beside the last bar
    fig.update_xaxes(title=translate(say("Time since the first press (s)"), lang), row=2, col=1)
    n = len(recs)
    fig.update_yaxes(type="category", categoryorder="array", categoryarray=rows, autorange="reversed",
                     showgrid=False, tickfont=dict(size=BASE_SIZE - (2 if n <= 12 else 5 if n <= 30 else 8)),
                     row=1, col=1)
    # 0, half and the peak: three labels fit the lower panel's height
    fig.update_yaxes(title=translate(say("together"), lang), rangemode="tozero", dtick=max(1, -(-share.peak // 2)),
                     row=2, col=1)
    fig.update_layout(barmode="overlay", showlegend=True)
    ttfts = [r.ttft for r in recs if r.ttft is not None]
    if not recs:
        title, cap = say("The room: no requests yet"), [say("Each attendee's press appears here as a bar the moment "
                                                            "it is sent.")]
    else:
        title = (say_n("The room: {n} request, up to {peak} generating together",
                       "The room: {n} requests, up to {peak} generating together", n, n=n, peak=share.peak)
                 if share.peak else say_n("The room: {n} request, none generating yet",
                                          "The room: {n} requests, none generating yet", n, n=n))
        cap = []
        if joined:
            late, j = next(iter(sorted(joined.items(), key=lambda kv: -kv[1].at_token)))
            cap.append(say("{joined} of the {n} requests joined an answer already being generated (e.g. {late} at "
                           "{early}'s token {k}): continuous batching takes a newcomer into the running batch at the "
                           "next step.", joined=len(joined), n=n, late=names[late], early=names[j.early],
                           k=j.at_token))
        elif share.peak > 1:
            cap.append(say("The requests were generated together, but none joined another mid-answer: they started "
                           "at the same step."))
        else:
            cap.append(say("No two answers were generated at the same time: each press came after the one before "
                           "had ended."))
        if share.counts:
            cap.append(say("Each token came out of a step shared by {mean} requests on average (the lower panel).",
                           mean=significant(share.mean)))
        if ttfts:
            cap.append(say("Time to first token: median {median}, longest {longest}.",
                           median=duration(statistics.median(ttfts), lang), longest=duration(max(ttfts), lang)))
    # on the big screen's first 1080 pixels, with the page's title and the round's status line above it
    return finish(fig, title, cap, placeholder=is_placeholder(run), height=min(820, max(460, 26 * n + 240)),
                  lang=lang)


def room_totals(together: RunResult, alone: RunResult) -> tuple[float, float, int, int]:
    """When the last answer was complete each way (s from the first request: together, one at a time) and the
    tokens generated each way (answers that ended well only)."""
    ok_a = [r for r in together.records if r.ok]
    ok_b = [r for r in alone.records if r.ok]
    return (_last_end(ok_a), _last_end(ok_b),
            sum(r.output_tokens for r in ok_a), sum(r.output_tokens for r in ok_b))


def room_contrast(together: RunResult, alone: RunResult, *, lang: str = "en") -> go.Figure:
    """Each attendee's answer complete, in seconds from the first request: as the room sent them (together) and
    the same requests one at a time; the title gives the last answer's end each way."""
    names = _names(together)
    a = {r.index: r for r in together.records}
    b = {r.index: r for r in alone.records}
    order = sorted(a, key=lambda i: (a[i].send_time, i))
    rows = [esc(names[i]) for i in order]
    fig = go.Figure()
    for runs, name, color in ((a, say("together (as the room pressed)"), BLUE),
                              (b, say("one at a time"), VERMILLION)):
        xs = [runs[i].end_time if i in runs and runs[i].ok else None for i in order]
        fig.add_bar(y=rows, x=xs, orientation="h", name=translate(name, lang), marker_color=color,
                    text=[seconds(x, lang) if x is not None else "" for x in xs], textposition="outside",
                    customdata=[significant(x) for x in xs], cliponaxis=False,
                    hovertemplate="%{y}: " + seconds("%{customdata}", lang) + "<extra></extra>")
    last_a, last_b, tok_a, tok_b = room_totals(together, alone)
    n = len(order)
    fig.update_layout(barmode="group", bargap=0.25, showlegend=True,
                      xaxis=dict(title=translate(say("Answer complete, s after the first request"), lang),
                                 rangemode="tozero", range=[0, max(last_a, last_b, 1.0) * 1.12]),
                      yaxis=dict(type="category", autorange="reversed", showgrid=False,
                                 tickfont=dict(size=BASE_SIZE - (2 if n <= 12 else 5 if n <= 30 else 8))))
    title = say("All {n} answers: {together} together, {alone} one at a time", n=n,
                together=seconds(last_a, lang), alone=seconds(last_b, lang))
    cap = [say("Together, the last answer was complete {together} after the first press; the same requests one at a "
               "time took {alone}, since each waited for every one before it.", together=seconds(last_a, lang),
               alone=seconds(last_b, lang))]
    if last_a > 0 and last_b > 0:
        cap.append(say("{ratio}× as long one at a time, for {a:,} and {b:,} generated tokens.",
                       ratio=significant(last_b / last_a), a=tok_a, b=tok_b))
    cap.append(say("Together also counts the seconds between the first press and the last."))
    return finish(fig, title, cap, placeholder=is_placeholder(together), height=min(900, max(420, 40 * n + 220)),
                  lang=lang)
