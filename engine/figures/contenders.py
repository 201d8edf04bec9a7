"""The Naive page's four contenders compared (the lab's steps 1-2): per-request latency and each one's whole
job, numbered as the page's buttons (`CONTENDERS`). Each takes `lang`."""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from engine.figures.theme import (
    BASE_SIZE,
    BLUE,
    GREEN,
    SKY,
    VERMILLION,
    esc,
    finish,
    is_placeholder,
    measured,
    run_colors,
    run_label,
    short,
    summary_of,
    why_failed,
    wrap,
)
from engine.digits import significant, times
from engine.measure.judge import verdict
from engine.messages import mark, say, say_n, seconds, translate
from engine.observe import disturbance
from engine.results.records import RunResult


def speedup(naive_run: Any, vllm_run: Any, lang: str = "en") -> verdict.Verdict | None:
    """vLLM against the naive loop on the same prompts, prompt by prompt (verdict.per_prompt): the naive latency
    over vLLM's, so a ratio above 1 is vLLM's speed-up. The one computation of it that the Naive page shows."""
    if naive_run is None or vllm_run is None:
        return None
    return verdict.per_prompt(vllm_run, naive_run, name=say("Latency per request"),
                              label_a=_name(vllm_run, lang), label_b=_name(naive_run, lang))


def speedup_said(v: verdict.Verdict) -> tuple[str, str]:
    """The speed-up as a title's few words and a caption's sentence, from one verdict: the same number in both."""
    if v.ratio is None:  # never from per_prompt (latencies are above 0); a verdict without a ratio says itself
        return v.short, v.said
    x = times(v.ratio if v.ratio >= 1 else 1 / v.ratio)
    if v.disturbed is not None:  # its noise is not this machine's: the effect as measured, no claim
        # the why is the caption's (a title longer than half a page is cut at the chart's edge), its number too
        return say("vLLM {x}× as measured, no verdict", x=significant(v.ratio, 3)), v.said
    if v.beyond_noise is None:  # one prompt answered on both sides: no interval
        return (say("vLLM {x}× faster, noise unknown", x=x) if v.ratio >= 1 else
                say("vLLM {x}× slower, noise unknown", x=x),
                say("One prompt answered on both sides: how much of that is noise is unknown."))
    if v.low is None or v.high is None:  # likewise: decided on values above 0, a verdict has the ratio's interval
        return v.short, v.said
    interval = dict(low=times(1 / v.high if v.ratio < 1 else v.low), high=times(1 / v.low if v.ratio < 1 else v.high),
                    how=v.how, level=verdict.percent(v.level))
    if not v.beyond_noise:
        return (say("no difference beyond noise"),  # the title's room (60 characters) holds no more
                say("Prompt by prompt, vLLM measured {x}× the naive loop's speed, within their noise ({level} "
                    "interval {low}× to {high}×, which holds no change; {how}).", x=times(v.ratio),
                    low=times(v.low), high=times(v.high), how=v.how, level=interval["level"]))
    if v.ratio >= 1:
        return (say("vLLM {x}× faster", x=x),
                say("Prompt by prompt, vLLM answers {x}× faster than the naive loop ({level} interval {low}× to "
                    "{high}×; {how}): the engine alone, before any batching.", x=x, **interval))
    return (say("vLLM {x}× slower", x=x),
            say("Prompt by prompt, vLLM answers {x}× slower than the naive loop ({level} interval {low}× to "
                "{high}×; {how}).", x=x, **interval))


# -- step 1-2: naive vs vLLM ------------------------------------------------------------------------

# The Naive page's four contenders, in the order its buttons and bars number them: the same prompts one at
# a time through transformers, as one padded static batch, one at a time through vLLM, all at once through
# vLLM (continuous batching). Names without their numbers (contender_name adds them).
CONTENDERS = (mark("Naive, one at a time"), mark("Static batch"), mark("vLLM, one at a time"),
              mark("vLLM, all at once"))


def contender(run: Any) -> int | None:
    """Which of CONTENDERS a run is (0-3), None for another kind of run: naive by its kind, vLLM by its
    scenario (the Naive page's "vllm-5-sequential" / "vllm-5-batch")."""
    kind, scenario = getattr(run, "kind", ""), getattr(run, "scenario", "") or ""
    if kind == "naive":
        return 0
    if kind == "static-batch":
        return 1
    if kind == "vllm" and scenario.endswith("-sequential"):
        return 2
    if kind == "vllm" and scenario.startswith("vllm-5"):
        return 3
    return None


def contender_name(k: int, lang: str = "en") -> str:
    """ "3 · vLLM, one at a time": the number the page's button and the chart's bar share."""
    return f"{k + 1} · {translate(CONTENDERS[k], lang)}"


def _name(run: Any, lang: str, numbered: bool = True) -> str:
    k = contender(run)
    if k is None:
        return run_label(run, lang)
    return contender_name(k, lang) if numbered else translate(CONTENDERS[k], lang)


def _in_order(runs: Iterable[Any]) -> list[Any]:
    """Runs in the contenders' order (others after them, as given)."""
    runs = list(runs)
    return sorted(runs, key=lambda r: (c if (c := contender(r)) is not None else len(CONTENDERS), runs.index(r)))


def latency_bars(naive_run: RunResult | None, vllm_run: RunResult | None,
                 extra_runs: Iterable[RunResult] = (), *, lang: str = "en", speed: Any = "own",
                 numbered: bool = True) -> go.Figure:
    """Grouped per-request latency bars: naive vs vLLM (+ e.g. static batching, vLLM all at once), in the
    contenders' order (CONTENDERS); averages in the legend (under the chart, clear of the title), the
    speed-up in the title. Either of the two main runs may be None. `speed`: the verdict the title and caption
    say, when the page judged it otherwise (the guided lab's over its repeats); None: no speed-up said.
    `numbered`: names as the Naive page's numbered buttons ("3 · vLLM, one at a time"); the guided lab, whose
    steps carry numbers of their own, names them without."""
    runs = _in_order(r for r in (naive_run, vllm_run, *extra_runs) if r is not None)
    fig = go.Figure()
    indices = sorted({r.index for run in runs for r in run.measured})
    xcat = {idx: f"#{k + 1}" for k, idx in enumerate(indices)}
    n_bars = sum(len(run.measured) for run in runs)
    avgs: dict[int, float] = {}
    placeholder = any(is_placeholder(r) for r in runs)
    colors = _contender_colors(runs)
    failed = translate(say("failed"), lang)
    for i, run in enumerate(runs):
        recs = measured(run)
        lat = [r.e2e if r.ok else None for r in recs]
        ok = [v for v in lat if v is not None]
        avg = sum(ok) / len(ok) if ok else float("nan")
        avgs[id(run)] = avg
        label = esc(_name(run, lang, numbered))
        hover = [
            f"<b>{label}</b><br>{esc(short(r.prompt, 60))}<br>"
            + (translate(say("latency {latency} s · {tokens} tokens · {rate} tok/s", latency=significant(r.e2e),
                             tokens=r.output_tokens, rate=significant(r.output_tokens / r.e2e)) if r.e2e else
                         say("latency {latency} s · {tokens} tokens", latency=significant(r.e2e),
                             tokens=r.output_tokens),
                         lang)
               if r.ok else f"{failed}<br>{why_failed(r, lang)}")
            for r in recs
        ]
        fig.add_bar(
            x=[xcat[r.index] for r in recs], y=[v if v is not None else 0 for v in lat],
            name=translate(say("{run} (all failed)", run=label) if math.isnan(avg) else
                           say("{run} (avg {avg} s)", run=label, avg=significant(avg)), lang),
            marker_color=colors[i],
            text=[significant(v) if v is not None else failed for v in lat] if n_bars <= 30 else None,
            textposition="outside", textfont=dict(size=BASE_SIZE - 2),
            hovertext=hover, hoverinfo="text", cliponaxis=False,
        )
    fig.update_layout(barmode="group", xaxis_title=translate(say("Request"), lang),
                      yaxis=dict(title=translate(say("Latency (s)"), lang), rangemode="tozero"),
                      xaxis=dict(type="category", categoryorder="array",
                                 categoryarray=[xcat[i] for i in indices]),
                      # under the plot: on top, a legend of four long names wraps into the title
                      legend=dict(orientation="h", x=0, xanchor="left", y=-0.2, yanchor="top"))
    v = speedup(naive_run, vllm_run, lang) if speed == "own" else speed
    if v is not None:  # one computation: the title's and caption's number
        phrase, sentence = speedup_said(v)
        title = say("Latency per request: {speedup}", speedup=phrase)
        cap = say("Each group of bars is the same prompt. {sentence}", sentence=sentence)
    else:
        title = say("Latency per request")
        said = []
        for run in runs:
            who, avg = _name(run, lang, numbered), avgs[id(run)]
            said.append(translate(say("{run} failed on every request (hover a 'failed' label for why)", run=who)
                                  if math.isnan(avg) else say("{run} averages {avg} s", run=who,
                                                              avg=significant(avg)), lang))
        cap = say("Each bar is one request; {runs}.", runs="; ".join(said)) if runs else say("No runs to show yet.")
    fig = finish(fig, title, cap, placeholder=placeholder, height=520, lang=lang)
    return fig.update_layout(margin=dict(t=80 + (34 if placeholder else 0)))  # no legend on top


def _contender_colors(runs: Sequence[Any]) -> list[str]:
    """One colour per contender wherever it is drawn (naive vermillion, static green, vLLM one at a time blue,
    vLLM at once sky); other runs as run_colors gives them."""
    fixed = (VERMILLION, GREEN, BLUE, SKY)
    others = run_colors(runs)
    return [fixed[c] if (c := contender(r)) is not None else others[i] for i, r in enumerate(runs)]


def _prompts(run: Any) -> int:
    return len(run.measured)


def _throughput(run: Any) -> float | None:
    """Output tokens per second over the run's wall time (its summary's, else counted from its requests)."""
    v = summary_of(run).get("output_throughput")
    if v is None and run.duration:
        v = sum(r.output_tokens for r in run.measured if r.ok) / run.duration
    return v


def contenders_chart(runs: Iterable[RunResult | None], *, lang: str = "en") -> go.Figure:
    """The whole job per contender, in CONTENDERS' order: the wall time to answer all the prompts (left,
    lower is better) and the output tokens per second over it (right, higher is better). The lesson the
    per-request bars hide: a batch's answers each wait for the longest, yet the batch finishes the whole
    job sooner. A contender not run yet keeps its place, marked so; a cold run (the first batch of its size
    on its server) is marked on its bar."""
    by = {contender(r): r for r in runs if r is not None and contender(r) is not None}
    cats = [contender_name(k, lang) for k in range(len(CONTENDERS))]
    wrapped = [wrap(esc(c), 16) for c in cats]
    present = [by.get(k) for k in range(len(CONTENDERS))]
    wall = [float(r.duration) if r is not None and r.duration else None for r in present]
    tput = [_throughput(r) if r is not None else None for r in present]
    not_run = translate(say("not run yet"), lang)

    def tag(r: Any) -> str:  # short: a word would run past the panel (the caption says what it means)
        return " ❄" if r is not None and r.extra.warmth.cold else ""

    # Short panel titles (two long ones ran into each other over a half-width column); which way is better
    # is said on each axis.
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.14,
                        subplot_titles=(translate(say("Wall time"), lang), translate(say("Throughput"), lang)))
    colors = [(VERMILLION, GREEN, BLUE, SKY)[k] for k in range(len(CONTENDERS))]
    for col, values, fmt in ((1, wall, lambda v: seconds(v, lang)), (2, tput, significant)):  # 0.47, not 0
        fig.add_bar(y=wrapped, x=[v or 0 for v in values], orientation="h", marker_color=colors, width=0.7,
                    # the cold mark once, on the time (a long mark would run off the throughput panel)
                    text=[f"<b>{fmt(v)}</b>{tag(r) if col == 1 else ''}" if v is not None else not_run
                          for v, r in zip(values, present)],
                    textposition="outside", cliponaxis=False, showlegend=False, hoverinfo="skip", row=1, col=col)
        top = max((v for v in values if v), default=1.0)
        fig.update_xaxes(range=[0, top * 1.7], showgrid=True, row=1, col=col)
    fig.update_yaxes(autorange="reversed", tickfont=dict(size=BASE_SIZE - 1))
    fig.update_yaxes(showticklabels=False, row=1, col=2)
    fig.update_xaxes(title_text=translate(say("seconds, lower is better"), lang), row=1, col=1)
    fig.update_xaxes(title_text=translate(say("tok/s, higher is better"), lang), row=1, col=2)
    fig.update_annotations(font=dict(size=BASE_SIZE + 1))
    ran = [(k, r) for k, r in enumerate(present) if r is not None and r.duration]
    counts = {_prompts(r) for _k, r in ran}
    n = counts.pop() if len(counts) == 1 else None
    busy = [str(k + 1) for k, r in ran if disturbance.disturbed(r.extra)]  # by number: the names hold commas
    if len(ran) >= 2 and n and busy:
        # the verdict's rule (engine.measure.judge.verdict): beside a disturbed run no finding either way, so the
        # times as measured, none called soonest (the latency chart's title says "no verdict" beside this)
        each = [say("{run} ({time} s)", run=contender_name(k, lang), time=significant(r.duration)) for k, r in ran]
        cap = [say("All {n} prompts answered, one run each, as measured: {times}. Which finished soonest is no "
                   "finding, as the machine was disturbed during {runs} (said below the charts).", n=n,
                   times="; ".join(translate(m, lang) for m in each),
                   runs=say("every run") if len(busy) == len(ran) else
                   say_n("run {runs}", "runs {runs}", len(busy), runs=", ".join(busy)))]
    elif len(ran) >= 2 and n:
        (kf, fast), (ks, slow) = min(ran, key=lambda p: p[1].duration), max(ran, key=lambda p: p[1].duration)
        # the times, not their ratio: one run each, so how much of the gap is noise is unknown
        cap = [say("{fast} answered all {n} prompts soonest, in {t_fast} s; {slow} took longest, {t_slow} s "
                   "(one run each).", fast=contender_name(kf, lang), slow=contender_name(ks, lang), n=n,
                   t_fast=significant(fast.duration), t_slow=significant(slow.duration))]
    elif ran:
        k, r = ran[0]
        cap = [say("{run} answered all {n} prompts in {time} s; run the others to compare.",
                   run=contender_name(k, lang), n=_prompts(r), time=significant(r.duration))]
    else:
        cap = [say("No runs to show yet.")]
    if len(ran) >= 2 and n and by.get(0) is not None and by.get(1) is not None and by[1].duration < by[0].duration \
            and not any(disturbance.disturbed(by[k].extra) for k in (0, 1)):  # a finding only where both were quiet
        cap.append(say("The static batch's answers each waited for its longest, yet it finished the whole job "
                       "in {batch} s against {naive} s one at a time: batching pays in total time, not "
                       "in each request's latency.", batch=significant(by[1].duration),
                       naive=significant(by[0].duration)))
    if len(ran) >= 2 and n is None:
        cap.append(say("Careful: these runs answered different numbers of prompts."))
    if any(r.extra.warmth.cold for _k, r in ran):
        cap.append(say("A run marked ❄ (cold) was the first batch of its size on its server: it can include start-up "
                       "work."))
    return finish(fig, say("The whole job: all prompts answered"), cap,
                  placeholder=any(is_placeholder(r) for _k, r in ran), height=440, lang=lang)
