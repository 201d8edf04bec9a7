"""How every chart looks and reads: fonts, colours, the plotly template, `finish` and chart labels.
See docs/internals.md#theme."""
from __future__ import annotations

import html
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio

from engine.measure.judge import failures, stats
from engine.messages import mark, say, translate
from engine.results.records import RequestRecord, RunResult, RunRow, Summary

# -- style ------------------------------------------------------------------------------------------

# Latin fonts first; Noto Sans CJK KR (fonts-noto-cjk) draws Korean in browsers and in PNG export.
FONT = ("Inter, 'Segoe UI', 'Helvetica Neue', Arial, 'Liberation Sans', 'DejaVu Sans', 'Noto Sans CJK KR', "
        "sans-serif")
BASE_SIZE = 18
INK = "#1a1a1a"
GRID = "#e3e3e3"
MUTED = "#6b6b6b"

# Okabe-Ito: distinguishable with every common colour-vision deficiency. Yellow left out (white bg).
BLUE, VERMILLION, GREEN, ORANGE, PURPLE, SKY, BLACK = (
    "#0072B2", "#D55E00", "#009E73", "#E69F00", "#CC79A7", "#56B4E9", "#000000")
PALETTE = [BLUE, VERMILLION, GREEN, ORANGE, PURPLE, SKY, BLACK]
KIND_COLORS = {"vllm": BLUE, "naive": VERMILLION, "static-batch": GREEN}
CONFIG_PALETTE = [BLUE, GREEN, ORANGE, PURPLE, SKY, VERMILLION, BLACK]  # one colour per config
DASHES = ["solid", "dash", "dot", "dashdot", "longdash"]
WAIT_COLOR = ORANGE  # send -> first token (queue + prefill)
DECODE_COLOR = BLUE  # first token -> last token
FAILED_COLOR = "#8c8c8c"

PLACEHOLDER_NOTE = mark("Shape-only Llama 3 8B: random weights, so any text shown is meaningless")
TEMPLATE_NAME = "serving_lab"


def rgba(hex_color: str, alpha: float) -> str:
    """A palette colour ("#RRGGBB") made see-through: fills and pale bars."""
    h = hex_color.lstrip("#")
    return f"rgba({int(h[0:2], 16)},{int(h[2:4], 16)},{int(h[4:6], 16)},{alpha})"


def template() -> go.layout.Template:
    """The shared look: large type, white background, light value-axis grid only, legend on top."""
    axis = dict(
        showgrid=False, zeroline=False, showline=True, linecolor="#444", linewidth=1.5,
        ticks="outside", tickcolor="#444", ticklen=6, automargin=True,
        title=dict(font=dict(size=BASE_SIZE + 1), standoff=12),
        tickfont=dict(size=BASE_SIZE - 1), gridcolor=GRID, gridwidth=1,
    )
    return go.layout.Template(
        layout=dict(
            font=dict(family=FONT, size=BASE_SIZE, color=INK),
            title=dict(font=dict(size=BASE_SIZE + 8, color=INK), x=0.01, xanchor="left",
                       y=0.97, yanchor="top", automargin=True),
            paper_bgcolor="white", plot_bgcolor="white",
            colorway=PALETTE,
            xaxis=axis, yaxis={**axis, "showgrid": True},
            legend=dict(orientation="h", x=0, xanchor="left", y=1.0, yanchor="bottom",
                        font=dict(size=BASE_SIZE - 1), bgcolor="rgba(255,255,255,0)",
                        itemclick="toggle"),
            hoverlabel=dict(font=dict(family=FONT, size=BASE_SIZE - 2), align="left"),
            margin=dict(l=20, r=30, t=110, b=20),
            bargap=0.25, bargroupgap=0.06,
            annotationdefaults=dict(font=dict(size=BASE_SIZE - 2)),
        )
    )


pio.templates[TEMPLATE_NAME] = template()


def caption(fig: go.Figure) -> str:
    """The one-sentence caption a figure function attached: what a viewer should notice."""
    meta = fig.layout.meta
    return (meta or {}).get("caption", "") if isinstance(meta, dict) else ""


def caption_said(fig: go.Figure) -> list:
    """The sentences the caption was said from, before translation (Messages: their ids and values), for what
    reads a figure by meaning rather than by its wording; empty for a figure this module did not finish."""
    return list(getattr(fig, "_caption_said", ()))


def title_said(fig: go.Figure) -> Any:
    """The sentence the title was said from, before translation (as caption_said); None when none was kept."""
    return getattr(fig, "_title_said", None)


def is_placeholder(run: RunResult | RunRow) -> bool:
    """True for the shape-only Llama 3 8B (random weights): its text means nothing."""
    return run.extra.server.placeholder_text or "shape-only" in (run.model or "").lower()


def finish(fig: go.Figure, title: str, cap: str | Sequence[str], *, placeholder: bool = False,
           height: int | None = None, lang: str = "en") -> go.Figure:
    """Every figure's last step: the template, its title (with the placeholder-model note under it),
    its caption in `layout.meta`, a top margin that fits the legend and subplot titles, its height.
    `title` and `cap` (one sentence, or several said one after another) are said in `lang`."""
    text = " ".join(translate(c, lang) for c in ([cap] if isinstance(cap, str) else cap))
    if placeholder:
        text = translate(say("{caption} ({note}.)", caption=text, note=PLACEHOLDER_NOTE), lang)
    fig._caption_said = [cap] if isinstance(cap, str) else list(cap)  # not drawn: kept on this object only
    fig._title_said = title
    fig.update_layout(
        template=TEMPLATE_NAME,
        title=dict(text=translate(title, lang)),
        meta={"caption": text},
    )
    shown = [t for t in fig.data if t.showlegend is not False and t.name]
    has_legend = fig.layout.showlegend is True or (fig.layout.showlegend is None and len(shown) >= 2)
    top = 110 if has_legend else 80
    if fig.layout.annotations and any(a.yref == "paper" and (a.y or 0) >= 1 for a in fig.layout.annotations):
        top = max(top, 110)  # subplot titles
    fig.update_layout(margin=dict(t=top))
    if placeholder:
        note_under_title(fig, translate(PLACEHOLDER_NOTE, lang))
    if height:
        fig.update_layout(height=height)
    return fig


def note_under_title(fig: go.Figure, note: str) -> go.Figure:
    """`note` under the figure's title, after any note already there ("a · b"); the first note takes the top
    margin's room for its line (appended to the title itself, a long title lost it off the edge)."""
    before = fig.layout.title.subtitle.text
    fig.update_layout(title_subtitle=dict(text=f"{before} · {note}" if before else note,
                                          font=dict(size=BASE_SIZE - 1, color=VERMILLION)))
    if not before:
        fig.update_layout(margin_t=(fig.layout.margin.t or 80) + 34)
    return fig


# -- runs and requests in words ---------------------------------------------------------------------

def measured(run: RunResult) -> list[RequestRecord]:
    return sorted(run.measured, key=lambda r: r.index)


def summary_of(run: RunResult | RunRow) -> Summary:
    """The run's summary; computed from its requests when it has none (a live run's)."""
    if not run.summary.empty or not (records := getattr(run, "records", None)):  # a RunRow has none
        return run.summary
    return stats.summarize(records, run.duration)


def run_label(run: Any, lang: str = "en") -> str:
    """A run's name on a chart (a preset's name said in `lang`; a name someone typed as it is)."""
    return translate(getattr(run, "label", "") or getattr(run, "kind", "") or getattr(run, "id", "run"), lang)


def run_colors(runs: Sequence[Any]) -> list[str]:
    """Kind colours (naive vermillion, vLLM blue, ...) when every run is of another kind; otherwise
    one colour per run, so two vLLM configs never share a colour."""
    kinds = [getattr(r, "kind", "") for r in runs]
    if len(set(kinds)) == len(kinds) and all(k in KIND_COLORS for k in kinds):
        return [KIND_COLORS[k] for k in kinds]
    return [CONFIG_PALETTE[i % len(CONFIG_PALETTE)] for i in range(len(runs))]


def _shown_width(text: str) -> int:
    """How wide a label is drawn, in Latin letters: a Hangul or CJK character takes about two."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def _cut(piece: str, width: int) -> list[str]:
    """A piece still wider than a line (a label without spaces or hyphens) in line-wide parts, an HTML entity
    (the label is escaped) never cut; a Latin word cut between two letters says so with a hyphen ("concurr-" /
    "ent", not "concurre" / "nt"), Hangul breaks anywhere without one."""
    def shown(text: str) -> int:  # an entity is drawn as one character
        return _shown_width(re.sub(r"&#?\w+;", "x", text))

    if shown(piece) <= width:
        return [piece]
    out, cur = [], ""
    for ch in re.findall(r"&#?\w+;|.", piece):
        if cur and shown(cur) + shown(ch) > width:
            if len(cur) > 2 and _latin(cur[-1]) and _latin(ch):
                out.append(cur[:-1] + "-")
                cur = cur[-1]
            else:
                out.append(cur)
                cur = ""
        cur += ch
    return [*out, cur] if cur else out


def _latin(ch: str) -> bool:
    return ch.isascii() and ch.isalpha()


def wrap(text: str, width: int = 18) -> str:
    """Break a label into <br>-separated lines of about `width` Latin letters' width (Korean counts double). A word
    longer than a line breaks after its hyphens ("gpu-memory-" / "utilization"): unbroken, it runs into the next
    bar's label."""
    parts: list[tuple[str, str]] = []  # (piece, what joins it to the one before on a line)
    if not text.strip():
        return ""
    for w in re.split(r"[ \t\n]+", text.strip()):
        # at a no-break space (Babel's "5:52:44\u202fPM") only when the word cannot fit a line, and without it: cut
        # anywhere, "12:04:54" / "\u202fPM" was drawn "12:04:54 -" / "PM" under History's eight bars
        for j, sub in enumerate(w.split("\u202f") if _shown_width(w) > width else [w]):
            pieces = re.findall(r"[^-]+-*|-+", sub) if _shown_width(sub) > width else [sub]
            pieces = [cut for p in pieces for cut in _cut(p, width)]
            parts += [(p, ("\u202f" if j else " ") if i == 0 else "") for i, p in enumerate(pieces)]
    lines, cur = [], ""
    for piece, sep in parts:
        if cur and _shown_width(cur) + len(sep) + _shown_width(piece) > width:
            lines.append(cur)
            cur = piece
        else:
            cur = f"{cur}{sep}{piece}" if cur else piece
    if cur:
        lines.append(cur)
    return "<br>".join(lines)


def short(text: str, n: int) -> str:
    """`text` on one line, at most `n` characters, cut at a word's end where one is near."""
    text = " ".join((text or "").split())
    if len(text) <= n:
        return text
    cut = text[: n - 1]
    space = cut.rfind(" ")
    return (cut[:space] if space > n // 2 else cut).rstrip() + "…"


def esc(text: str) -> str:
    return html.escape(text or "", quote=False)


def why_failed(r: RequestRecord, lang: str = "en") -> str:
    """Why a request failed, for its hover: the cause sentence (what happened, what to do), wrapped."""
    if not r.error:
        return translate(say("unfinished"), lang)
    return wrap(esc(translate(failures.failure_cause(r.error), lang)), 64)


def preview(r: RequestRecord, placeholder: bool, n: int = 90, lang: str = "en") -> str:
    """A hover's line with the start of the answer (tagged as meaningless for a random-weight model)."""
    if not r.output_text:
        return ""
    text = esc(short(r.output_text, n))
    if placeholder:
        text = say("[meaningless text, random-weight model] {text}", text=text)
    return "<br>" + translate(say("answer: {text}", text=text), lang)


@dataclass
class Bars:
    """One kind of a request timeline's bars (waiting, generating, failed): each bar's row, start, length and
    hover text, as go.Bar takes them (y, base, x, hovertext)."""

    y: list[str | int] = field(default_factory=list)
    base: list[float] = field(default_factory=list)
    x: list[float] = field(default_factory=list)
    hover: list[str] = field(default_factory=list)

    def add(self, y: str | int, base: float, x: float, hover: str) -> None:
        self.y.append(y)
        self.base.append(base)
        self.x.append(x)
        self.hover.append(hover)
