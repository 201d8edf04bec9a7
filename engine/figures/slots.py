"""The batch's slots step by step, one panel a run on one step axis: static against continuous batching, measured.
See docs/measuring.md#slots."""
from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from engine.figures.theme import BASE_SIZE, DECODE_COLOR, INK, MUTED, WAIT_COLOR, finish, is_placeholder
from engine.figures.theme import run_label
from engine.measure.judge.slots import FINISHED, GENERATING, IDLE, PROMPT, SlotGrid, occupancy
from engine.messages import mark, say, translate
from engine.results.records import RunResult

IDLE_COLOR = "#ececec"
WASTE_COLOR = "#b2182b"  # a deep red, far from the prompt's orange on a washed-out projector
STATE_COLORS = {PROMPT: WAIT_COLOR, GENERATING: DECODE_COLOR, FINISHED: WASTE_COLOR, IDLE: IDLE_COLOR}
STATE_NAMES = {PROMPT: mark("prompt: prefill or queue"), GENERATING: mark("generating"),
               FINISHED: mark("finished, waiting for the batch"), IDLE: mark("idle")}


def _colorscale() -> list[list]:
    """A stepped scale: z = the state (0..3) picks exactly its colour."""
    scale = []
    for s in (PROMPT, GENERATING, FINISHED, IDLE):
        scale += [[s / 4, STATE_COLORS[s]], [(s + 1) / 4, STATE_COLORS[s]]]
    return scale


def slot_chart(runs: Sequence[RunResult | None], *, lang: str = "en") -> go.Figure:
    """One panel per run (a static batch, a vLLM run, or both side by side), each slot a row and each
    decode step a column, on one step axis. A run that cannot be drawn keeps its panel with the reason."""
    drawn = [r for r in runs if r is not None]
    grids = [occupancy(r) for r in drawn]
    titles = [_panel_title(r, g, lang) for r, g in zip(drawn, grids)]
    fig = make_subplots(rows=1, cols=max(1, len(drawn)), subplot_titles=titles or None, horizontal_spacing=0.07)
    width = max((g.steps * g.steps_per_column for g in grids if isinstance(g, SlotGrid)), default=1)
    hover_row = translate(mark("slot {slot} · step {step}"), lang)  # filled per cell below
    for k, (run, g) in enumerate(zip(drawn, grids), start=1):
        if not isinstance(g, SlotGrid):
            fig.add_annotation(text=translate(g, lang), xref=f"x{k} domain", yref=f"y{k} domain", x=0.5, y=0.5,
                               showarrow=False, font=dict(size=BASE_SIZE - 1, color=MUTED), width=380)
            fig.update_xaxes(visible=False, row=1, col=k)
            fig.update_yaxes(visible=False, row=1, col=k)
            continue
        names = {s: translate(n, lang) for s, n in STATE_NAMES.items()}
        xs = [c * g.steps_per_column for c in range(g.steps)]
        ys = [translate(say("slot {n}", n=i + 1), lang) for i in range(g.slots)]
        hover = [[hover_row.format(slot=i + 1, step=x) + "<br>" + names[s]
                  + (f" · #{o + 1}" if o is not None else "") for x, s, o in zip(xs, row, owners)]
                 for i, (row, owners) in enumerate(zip(g.cells, g.owner))]
        fig.add_trace(go.Heatmap(
            z=g.cells, x=xs, y=ys, zmin=-0.5, zmax=3.5, colorscale=_colorscale(), showscale=False, ygap=3,
            hovertext=hover, hoverinfo="text", name=run_label(run, lang)), row=1, col=k)
        axis = (translate(say("decode step (exact)"), lang) if g.kind == "static" else
                translate(say("decode step (estimated, 1 column = {ms:.0f} ms)", ms=g.step_s * 1000), lang))
        fig.update_xaxes(title=axis, range=[-0.5, width + 0.5], row=1, col=k)
        fig.update_yaxes(autorange="reversed", showgrid=False, row=1, col=k)
    for s in (PROMPT, GENERATING, FINISHED, IDLE):  # the legend: one square per state
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=translate(STATE_NAMES[s], lang),
                                 marker=dict(symbol="square", size=18, color=STATE_COLORS[s],
                                             line=dict(color=MUTED, width=1) if s == IDLE else None)))
    fig.update_annotations(font=dict(size=BASE_SIZE, color=INK), selector=dict(xref="paper"))
    slots = max((g.slots for g in grids if isinstance(g, SlotGrid)), default=3)
    height = 320 + 34 * slots
    # the legend between the title (and the placeholder model's note under it) and the panels' titles, a
    # fixed distance from the top whatever the height
    placeholder = any(is_placeholder(r) for r in drawn)
    below = 58 + (30 if placeholder else 0)
    fig.update_layout(showlegend=True, legend=dict(yref="container", y=1 - below / height, yanchor="top"))
    fig = finish(fig, say("Batch slots, step by step"), _caption(drawn, grids), placeholder=placeholder,
                 height=height, lang=lang)
    return fig.update_layout(margin=dict(t=fig.layout.margin.t + 24))


def _panel_title(run: RunResult, g: SlotGrid | str, lang: str) -> str:
    name = translate(say("static batch") if run.kind == "static-batch" else say("vLLM"), lang)
    if not isinstance(g, SlotGrid):
        return name
    return translate(say("{name}: {wasted} of {spent} slot-steps wasted", name=name, wasted=g.wasted,
                         spent=g.used + g.wasted), lang)


def _caption(runs: Sequence[RunResult], grids: Sequence[SlotGrid | str]):
    drawn = {("static" if r.kind == "static-batch" else "continuous"): g for r, g in zip(runs, grids)
             if isinstance(g, SlotGrid)}
    static, vllm = drawn.get("static"), drawn.get("continuous")
    if static and vllm:
        return say("In the static batch {wasted} slot-steps ({share}) held finished answers (red) until the longest "
                   "was done; in vLLM {v_wasted} were wasted: each answer left when it ended and its slot was free "
                   "for the next request at once.", wasted=static.wasted, share=f"{1 - static.useful_share:.0%}",
                   v_wasted=vllm.wasted)
    if static:
        return say("{wasted} of the static batch's slot-steps ({share}) held finished answers (red) until the longest "
                   "was done: the batch kept computing them and returned nothing.", wasted=static.wasted,
                   share=f"{1 - static.useful_share:.0%}")
    if vllm and vllm.refills:
        return say("No slot held a finished answer: each request left when it ended and the next one took its slot "
                   "at once; {wasted} slot-steps were idle while a request waited.", wasted=vllm.wasted)
    if vllm:
        return say("No slot held a finished answer: each of the {n} requests had its own slot from the start and "
                   "left it when its answer ended.", n=vllm.requests)
    return next((g for g in grids if isinstance(g, str)), say("There is no run to draw."))
