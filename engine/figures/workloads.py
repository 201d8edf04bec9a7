"""A workload before it runs (the lengths a Plan will send) and a multi-turn chat after (TTFT per turn).
See docs/measuring.md#workloads."""
from __future__ import annotations

from collections import Counter

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from engine.figures.theme import BLUE, GREEN, MUTED, VERMILLION, finish
from engine.measure.judge import turns, verdict
from engine.measure.workloads.base import Plan
from engine.measure.workloads.tokens import CHARS_PER_TOKEN
from engine.messages import say, translate
from engine.results.records import RunResult


def length_histogram(plan: Plan, *, lang: str = "en") -> go.Figure:
    """Input tokens per request (and answer lengths when the plan holds them), with the summary's median and p99
    in the caption, and how the tokens were counted."""
    fig = go.Figure()
    top = max([*plan.input_tokens, *plan.output_tokens, 1])
    bins = dict(start=0, end=top + 1, size=max(1, -(-top // 30)))  # one set of bins for both: bars side by side
    fig.add_histogram(x=plan.input_tokens, name=translate(say("prompt tokens"), lang), marker_color=BLUE, xbins=bins)
    if plan.output_tokens:
        fig.add_histogram(x=plan.output_tokens, name=translate(say("answer tokens"), lang), marker_color=VERMILLION,
                          xbins=bins)
    fig.update_layout(barmode="group", bargap=0.15)
    fig.update_xaxes(title_text=translate(say("tokens per request"), lang), rangemode="tozero")
    counts = [n for xs in (plan.input_tokens, plan.output_tokens)
              for n in Counter(x // bins["size"] for x in xs).values()]
    # whole requests on the axis: plotly's own ticks say "2.5 requests" for a short workload
    fig.update_yaxes(title_text=translate(say("requests"), lang), dtick=max(1, -(-max(counts, default=1) // 6)))
    s, cap = plan.summary, []
    if plan.conversations is not None:  # only the first turns are known before running: later ones carry replies
        cap.append(say("Each conversation's first turn; every later turn also carries the history so far."))
    if (i := s.get("input_tokens")) is not None:
        cap.append(say("Prompts: median {median:.0f} tokens, 99th percentile {p99:.0f}, longest {max:.0f}.",
                       median=i["median"], p99=i["p99"], max=i["max"]))
    if (o := s.get("output_tokens")) is not None:
        cap.append(say("Answers held to: median {median:.0f} tokens, 99th percentile {p99:.0f}, longest {max:.0f}.",
                       median=o["median"], p99=o["p99"], max=o["max"]))
    if s.get("tokenizer"):
        cap.append(say("Tokens counted with the tokenizer of {model}.", model=s["tokenizer"]))
    else:
        cap.append(say("Tokens estimated at {n} characters a token: no tokenizer was given.", n=CHARS_PER_TOKEN))
    # the requests it sends (a multi-turn chat's every turn), not the bars drawn
    return finish(fig, say("What this workload sends: {n} requests", n=s.get("sent") or len(plan.input_tokens)),
                  cap, height=460, lang=lang)


def _ttfts(run: RunResult, turn: int) -> list[float]:
    """The measured, answered requests' TTFT (s) of one turn index (the values turns.by_turn takes the median of)."""
    return [r.ttft for r in run.records if not r.warmup and r.turn == turn and r.ok and r.ttft is not None]


def ttft_by_turn(run: RunResult, *, lang: str = "en") -> go.Figure:
    """Median and p99 TTFT per turn index (ms), and the mean prompt the turn sent (tokens, the history so far),
    with the tokens its prefix cache served when the server says them."""
    by = turns.by_turn(run.records)
    xs = [t.turn + 1 for t in by]
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.14, row_heights=[0.6, 0.4])
    fig.add_scatter(x=xs, y=[(t.median_ttft_s or 0) * 1000 for t in by], mode="lines+markers",
                    name=translate(say("median TTFT"), lang), line=dict(color=BLUE, width=3), marker=dict(size=11),
                    row=1, col=1)
    fig.add_scatter(x=xs, y=[(t.p99_ttft_s or 0) * 1000 for t in by], mode="lines+markers",
                    name=translate(say("p99 TTFT"), lang), line=dict(color=VERMILLION, width=3, dash="dot"),
                    marker=dict(size=9), row=1, col=1)
    fig.add_bar(x=xs, y=[t.mean_prompt_tokens or 0 for t in by], name=translate(say("prompt tokens (mean)"), lang),
                marker_color=MUTED, row=2, col=1)
    if any(t.mean_cached_tokens is not None for t in by):
        fig.add_bar(x=xs, y=[t.mean_cached_tokens or 0 for t in by],
                    name=translate(say("of which from the prefix cache"), lang), marker_color=GREEN, row=2, col=1)
    fig.update_layout(barmode="overlay")
    fig.update_xaxes(title_text=translate(say("Turn of the conversation"), lang), dtick=1, row=2, col=1)
    fig.update_yaxes(title_text=translate(say("TTFT (ms), lower is better"), lang), rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text=translate(say("tokens"), lang), rangemode="tozero", row=2, col=1)
    if len(by) >= 2 and by[0].median_ttft_s and by[-1].median_ttft_s:
        # a later turn slower than the first is a finding only beyond the noise of their requests (and never beside
        # a disturbed run): engine.measure.judge.verdict, the rule every comparison follows
        first, last = (_ttfts(run, t.turn) for t in (by[0], by[-1]))
        v = verdict.beside(verdict.compare(first, last, name=say("TTFT"), label_a=say("Turn {n}", n=1),
                                           label_b=say("Turn {n}", n=by[-1].turn + 1), per=verdict.REQUESTS,
                                           unit="s"), (str(run.label), [run]))
        history = say("Turn {last}'s prompt held {tokens:,.0f} tokens of history on average.", last=by[-1].turn + 1,
                      tokens=by[-1].mean_prompt_tokens or 0)
        cap = [v.said, history] if v is not None else [history]
    elif by:
        cap = [say("One turn only: run more turns to see the history grow.")]
    else:
        cap = [say("This run has no multi-turn chats.")]
    return finish(fig, say("TTFT per turn: does a later turn still start fast?"), cap, height=620, lang=lang)
