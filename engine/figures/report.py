"""One self-contained HTML file of chosen runs, opened anywhere with no network.
See docs/internals.md#report."""
from __future__ import annotations

import html
import time
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

import plotly.graph_objects as go
import plotly.io as pio
from plotly.offline import get_plotlyjs

from engine.digits import significant
from engine.figures.ceiling import ceiling_bars
from engine.figures.compare import history_compare
from engine.figures.sweep import sweep_chart
from engine.figures.requests import concurrent_latency_bars, request_timeline, throughput_over_time
from engine.figures.theme import FONT, INK, MUTED, caption, is_placeholder
from engine.measure.judge import ceiling, failures, prefix, repeats, token_check, verdict, warmth
from engine.measure.judge.slo import Slo, judge
from engine.measure.judge.stats import peak_in_flight
from engine.measure.load.spec import arrivals_recorded
from engine.measure.workloads.named import named
from engine.measure.workloads.tokens import CHARS_PER_TOKEN
from engine.messages import mark, say, say_n, seconds, translate
from engine.metrics import DISTRIBUTIONS, metric_info
from engine.observe import disturbance
from engine.observe.bandwidth import Bandwidth, from_table
from engine.observe.hardware import summary_line
from engine.results.credentials import scrub_run, scrub_text
from engine.results.records import RunResult, is_sane_time
from engine.serving import models

# The charts' own buttons stay (zoom, hover, PNG download); nothing links to plotly's site.
NOT_RECORDED = mark("Not recorded.")
_PLOT_CONFIG = {"displaylogo": False, "responsive": True}
_STATS = (("mean", mark("Mean")), ("median", mark("Median")), ("p99", "P99"))  # the columns of a latency table
# The server flags a reader compares first, as vLLM spells them (ServerConfig field -> flag)
_FLAGS = (("max_model_len", "--max-model-len"), ("gpu_memory_utilization", "--gpu-memory-utilization"),
          ("cpu_kvcache_gib", "VLLM_CPU_KVCACHE_SPACE (GiB)"), ("max_num_seqs", "--max-num-seqs"),
          ("dtype", "--dtype"), ("tensor_parallel_size", "--tensor-parallel-size"),
          ("enable_prefix_caching", "--enable-prefix-caching"), ("enforce_eager", "--enforce-eager"),
          ("load_format", "--load-format"))


def report_html(history, ids: Sequence[str], lang: str = "en") -> str:
    """build_report of the saved runs `ids` read from `history` (engine.results.history.History): a run
    deleted since the page was drawn is named in it, not a failed download."""
    runs, gone = history.readable(list(ids))
    return build_report(runs, lang, gone=gone)


def build_report(runs: Sequence[RunResult], lang: str = "en", *, made_at: float | None = None,
                 gone: Sequence[str] = (), findings: Sequence[tuple[object, object]] = ()) -> str:
    """The runs as one HTML document (a str), its text in `lang`; `gone`: ids picked for it that were
    deleted before it was made (said, so the reader knows the report is short of them); `findings`:
    (title, sentence) pairs put first as the summary (the guided lab's 실험 결과, engine.guide)."""
    runs = [_scrubbed(r) for r in runs]
    r = _Writer(lang)
    title = r.t(mark("Serving Lab report"))
    made = say_n("Made {when}; {n} run.", "Made {when}; {n} runs.", len(runs), when=r.when(made_at or time.time()))
    body = [f"<header><h1>{title}</h1><p class='muted'>" + r.t(made) + "</p></header>"]
    if gone:
        body.append("<p class='muted'>" + r.t(say("Deleted from the history before this report was made, so not in "
                                                  "it: {ids}.", ids=", ".join(gone))) + "</p>")
    if findings:
        body.append("<section>" + r.tag("h2", mark("Summary")) + "<ol class='findings'>" + "".join(
            f"<li><b>{r.t(title)}</b> {r.t(text)}</li>" for title, text in findings) + "</ol></section>")
    if len(runs) > 1:
        body.append(r.comparison(runs))
    body += [r.run_section(run, i) for i, run in enumerate(runs, 1)]
    body.append("<footer class='muted'>" + r.t(say(
        "Made by Serving Lab. The charts are interactive (hover, zoom, double-click to reset) and need no network. "
        "Secrets such as API keys are left out, as in every export.")) + "</footer>")
    return (f"<!DOCTYPE html>\n<html lang='{html.escape(lang)}'>\n<head>\n<meta charset='utf-8'>\n"
            f"<meta name='viewport' content='width=device-width, initial-scale=1'>\n<title>{title}</title>\n"
            f"<style>{_CSS}</style>\n<script type='text/javascript'>{get_plotlyjs()}</script>\n</head>\n"
            "<body><main>\n" + "\n".join(body) + "\n</main></body>\n</html>\n")


def _scrubbed(run: RunResult) -> RunResult:
    """The run as an export would carry it: no credential in its settings, command, URLs or errors (nor
    in its label, which someone may have typed a URL into; a label left as it was keeps its wording)."""
    clean = scrub_run(run)
    label = scrub_text(run.label)
    return clean if label == run.label else replace(clean, label=label)


class _Writer:
    """The pieces of the page in one language: every text escaped on its way in."""

    def __init__(self, lang: str):
        self.lang = lang

    def t(self, text: object) -> str:
        """Text said in the report's language, escaped."""
        return html.escape(translate(text, self.lang) if text is not None else "")

    def tag(self, name: str, text: object, cls: str = "") -> str:
        """One element holding text in the report's language (a template inside an f-string would not be
        found by `pybabel extract`: say it outside, pass it here)."""
        return f"<{name}{f' class={cls!r}' if cls else ''}>{self.t(text)}</{name}>"

    def seconds(self, v: float | None) -> str:
        return "–" if v is None else html.escape(seconds(significant(v, 3), self.lang))

    def when(self, t: float) -> str:
        if not is_sane_time(t):
            return translate(mark("unknown"), self.lang)
        from babel.dates import format_datetime  # ~0.1 s to import, paid only when a date is shown

        return format_datetime(datetime.fromtimestamp(t), format="medium", locale=self.lang)

    def figure(self, fig: go.Figure) -> str:
        """A chart as a div and the call that draws it (plotly.js is in the page once), and its caption."""
        div = pio.to_html(fig, full_html=False, include_plotlyjs=False, include_mathjax=False, config=_PLOT_CONFIG,
                          default_width="100%", default_height=f"{fig.layout.height or 480}px")
        cap = caption(fig)
        return f"<figure>{div}" + (f"<figcaption>{html.escape(cap)}</figcaption>" if cap else "") + "</figure>"

    def table(self, head: Sequence[str], rows: Sequence[Sequence[str]], cls: str = "") -> str:
        """A table of already escaped cells; the first column is a row's name."""
        th = "".join(f"<th>{h}</th>" for h in head)
        tr = "".join("<tr>" + "".join(f"<{'th' if i == 0 else 'td'}>{c}</{'th' if i == 0 else 'td'}>"
                                      for i, c in enumerate(row)) + "</tr>" for row in rows)
        return f"<table class='{cls}'><thead><tr>{th}</tr></thead><tbody>{tr}</tbody></table>"

    # -- several runs ---------------------------------------------------------------------------
    def comparison(self, runs: list[RunResult]) -> str:
        """History's view of the runs: one line each, then the metrics side by side."""
        keys = ("output_throughput", "mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "p99_e2el_ms")
        head = [self.t(mark("run")), self.t(mark("started")), self.t(mark("cold / warm")), self.t(mark("OK / failed")),
                self.t(mark("Wall time"))]
        head += [self.t(say("{metric} ({unit})", metric=metric_info(k).label, unit=metric_info(k).unit)) for k in keys]
        rows = [[f"<a href='#run-{i}'>{i}. {self.t(run.label or run.scenario)}</a>",
                 html.escape(self.when(run.started_at)), self.cold_warm(run), self.ok_failed(run),
                 self.seconds(run.duration),
                 *(_num(run.summary.get(k)) for k in keys)]
                for i, run in enumerate(runs, 1)]
        parts = ["<section>" + self.tag("h2", mark("Runs compared")), self.table(head, rows, "numbers")]
        if said := _together(runs):  # repeats' spread, and differences only beyond their noise
            parts.append("<ul class='notes'>" + "".join(f"<li>{self.t(m)}</li>" for m in said) + "</ul>")
        for metric in ("output_throughput", "mean_ttft_ms"):
            parts.append(self.figure(history_compare(runs, metric, lang=self.lang)))
        levels = [r for r in runs if r.extra.sweep_level is not None and r.kind == "vllm"]
        if len(levels) > 1:
            parts.append(self.figure(sweep_chart(levels, lang=self.lang)))
        if sum(ceiling.run_ceiling(r) is not None for r in runs) > 1:
            parts.append(self.figure(ceiling_bars(runs, lang=self.lang)))
        return "\n".join(parts) + "</section>"

    def cold_warm(self, run: RunResult) -> str:
        """As History's column: cold (its server's first batch of that size), warm, or blank when unknown."""
        cold = run.extra.warmth.cold
        return "" if cold is None else self.t(mark("❄ cold") if cold else mark("warm"))

    def ok_failed(self, run: RunResult) -> str:
        s = run.summary
        return f"{s.completed or 0} / {s.failed or 0}"

    # -- one run ----------------------------------------------------------------------------------
    def run_section(self, run: RunResult, i: int) -> str:
        name = self.t(run.label or run.scenario)
        about = [(mark("Scenario"), html.escape(run.scenario)), (mark("Kind"), html.escape(run.kind)),
                 (mark("Started"), html.escape(self.when(run.started_at))),
                 (mark("Model"), _model(run.model)),
                 (mark("Load"), self.t(_load_said(run))),
                 *([(mark("Workload"), self.workload(run.load.workload))] if run.load.workload else []),
                 (mark("Versions"), html.escape(", ".join(f"{k} {v}" for k, v in run.versions.items()) or "–"))]
        parts = [f"<section class='run' id='run-{i}'><h2>{i}. {name}</h2>",
                 "<div class='cols'><div>" + self.pairs(about) + "</div><div>"
                 + self.tag("h3", mark("Machine")) + self.machine(run) + "</div></div>",
                 self.tag("h3", mark("Server flags") if run.kind == "vllm" else mark("Settings")), self.flags(run),
                 self.tag("h3", mark("Results")), self.results(run)]
        if notes := self.notes(run):
            parts.append("<ul class='notes'>" + "".join(f"<li>{n}</li>" for n in notes) + "</ul>")
        parts += [self.figure(f) for f in _run_figures(run, self.lang)]
        return "\n".join(parts) + "</section>"

    def workload(self, w: dict) -> str:
        """What a workload run sent, as it recorded it (never the file): its kind and file, its rows, its lengths."""
        return "<br>".join(self.t(part) for part in _workload_said(w))

    def pairs(self, items) -> str:
        return "<dl>" + "".join(f"<dt>{self.t(k)}</dt><dd>{v}</dd>" for k, v in items) + "</dl>"

    def machine(self, run: RunResult) -> str:
        """What it ran on: the summary line, each GPU or the CPU with its memory bandwidth and its source."""
        hw = run.hardware if isinstance(run.hardware, dict) else {}
        if not hw:
            return self.tag("p", NOT_RECORDED, "muted")
        items = [(mark("Hardware"), self.t(summary_line(hw)))]
        gpus = [g for g in hw.get("gpus") or () if isinstance(g, dict)]
        for g in gpus:
            bw = Bandwidth.from_dict(g.get("memory_bandwidth")) or from_table(str(g.get("name", "")))
            items.append((say("GPU {index}", index=g.get("index", 0)), html.escape(str(g.get("name", "GPU")))
                          + (f" · {self.bandwidth(bw)}" if bw else "")))
        cpu = hw.get("cpu") if isinstance(hw.get("cpu"), dict) else {}
        if cpu:
            bw = Bandwidth.from_dict(cpu.get("memory_bandwidth"))
            items.append((mark("CPU"), html.escape(str(cpu.get("model",
                                                               "–"))) + (f" · {self.bandwidth(bw)}" if bw else "")))
        if hw.get("os"):
            items.append((mark("System"), html.escape(str(hw["os"]))))
        return self.pairs(items)

    def bandwidth(self, bw: Bandwidth) -> str:
        said = self.t(say("memory bandwidth {gb_s:,.1f} GB/s ({source})", gb_s=bw.gb_s, source=bw.said))
        return said + (f" <span class='muted'>{html.escape(bw.reference)}</span>" if bw.reference else "")

    def flags(self, run: RunResult) -> str:
        """The flags of a server this app started, and its exact command; for one it did not start, where
        it was and that its flags are its own."""
        cfg = run.config if isinstance(run.config, dict) else {}
        if run.kind != "vllm":  # the naive baseline: transformers' own settings, no server
            rows = [[html.escape(str(k)), html.escape(", ".join(f"{a}={b}" for a, b in v.items())
                                                      if isinstance(v, dict) else str(v))] for k, v in cfg.items()]
            return (self.table([self.t(mark("setting")), self.t(mark("value"))], rows, "flags") if rows else
                    self.tag("p", NOT_RECORDED, "muted"))
        if not cfg:
            sentence = say("Not recorded: this run went to a server this app did not start ({url}), which kept its "
                           "own flags.", url=run.load.base_url or "–")
            return self.tag("p", sentence, "muted")
        cpu = cfg.get("device") == "cpu"
        rows = [["--model", html.escape(str(cfg.get("model", "–")))]]
        for key, flag in _FLAGS:
            if key not in cfg or (key == "gpu_memory_utilization" and cpu) or (key == "cpu_kvcache_gib" and not cpu):
                continue
            value = cfg[key]
            rows.append([html.escape(flag),
                         self.t(mark("vLLM's default")) if value is None else html.escape(str(value))])
        if extra := cfg.get("extra_args"):
            rows.append([self.t(mark("other flags")), html.escape(" ".join(map(str, extra)))])
        out = self.table([self.t(mark("flag")), self.t(mark("value"))], rows, "flags")
        if run.command:
            out += f"<pre>{html.escape(run.command)}</pre>"
        return out

    def results(self, run: RunResult) -> str:
        """The headline numbers, then the latency distributions as vllm bench serve reports them."""
        s = run.summary
        head = [(mark("OK / failed"), self.ok_failed(run)), (mark("Wall time"), self.seconds(run.duration)),
                (mark("Output throughput"), _num(s.get("output_throughput")) + " tok/s"),
                (mark("Request throughput"), _num(s.get("request_throughput")) + " req/s"),
                (mark("Output tokens"), _num(s.get("total_output_tokens"), 0))]
        if s.get("request_goodput") is not None:
            head.append((mark("Goodput"), _num(s.get("request_goodput")) + " req/s"))
        tiles = "".join(f"<div class='tile'><div class='muted'>{self.t(k)}</div><b>{v}</b></div>" for k, v in head)
        rows = [[self.t(name), *(_num(s.get(f"{stat}_{d}_ms")) for stat, _ in _STATS)]
                for d, name in DISTRIBUTIONS.items() if any(s.get(f"{stat}_{d}_ms") is not None for stat, _ in _STATS)]
        head_row = [self.t(mark("ms")), *(self.t(said) for _, said in _STATS)]
        return f"<div class='tiles'>{tiles}</div>" + (self.table(head_row, rows, "numbers") if rows else "")

    def notes(self, run: RunResult) -> list[str]:
        """What the pages say about the run in words, each sentence escaped."""
        out = [self.t(sentence) for _, sentence in failures.run_causes(run)]
        if cached := prefix.cached_said(run):  # its prefill mostly skipped: not new prompts' numbers
            out.append(self.t(cached))
        if cold := warmth.said(run.extra):  # why it is cold (start-up work in its numbers) or warm
            out.append(self.t(cold))
        if beside := disturbance.said(run.extra):  # other programs, another client, chats beside it
            out.insert(0, self.t(beside))
        if check := token_check.token_check(run.extra):
            out.append(self.t(" ".join(translate(x, self.lang) for x in check.sentences)))
        if limit := ceiling.run_ceiling(run):
            out.append(self.t(limit.sentence))
        slo = Slo.from_config(run.extra.slo.goodput_ms)
        if slo is not None and (verdict := judge(run, slo)) is not None and verdict.requests:
            out.append(self.t(verdict.said))
        if is_placeholder(run):
            out.append(self.t(mark("Shape-only Llama 3 8B: random weights, so any text shown is meaningless")))
        return out


def _model(model: str | None) -> str:
    """The model by its name, its full path (a folder it was served from) on hover."""
    name = html.escape(models.shown_name(model) or "–")
    return f"<span title='{html.escape(model or '')}'>{name}</span>" if model and name != html.escape(model) else name


def _load_said(run: RunResult):
    """What was sent, in a few words: how many requests, how, the answer length."""
    ld = run.load
    how = {"sequential": mark("one after another"), "burst": mark("all at once"),
           "poisson": mark("at random times"), "concurrency": mark("with a limit on requests in flight")}
    values = dict(n=ld.num_requests or len(run.measured), how=how.get(ld.shape, ld.shape or "–"),
                  tokens=ld.max_tokens if ld.max_tokens is not None else "–",
                  in_flight=ld.concurrency if ld.concurrency is not None else "–")
    if (arrivals := arrivals_recorded(ld)) is not None:  # at a rate: no number in flight was set, the peak was seen
        return say("{n} requests, {arrivals}; at most {peak} in flight (observed); at most {tokens} output tokens "
                   "each.", arrivals=arrivals, peak=peak_in_flight(run.records), **values)
    return say("{n} requests, {how}; up to {in_flight} in flight; at most {tokens} output tokens each.", **values)


def _workload_said(w: dict) -> list:
    """A recorded workload in a few lines: kind and name, what of it was sent, its lengths, the file's hash."""
    out = [named(w)]
    if w.get("kind") == "multi-turn":
        out.append(say("{convs} conversations × {turns} turns ({n} requests)", convs=w.get("conversations"),
                       turns=w.get("turns"), n=w.get("sent")))
    elif w.get("rows") is not None:
        out.append(say("{sent:,} of its {rows:,} rows sent", sent=w.get("sent") or 0, rows=w["rows"]))
    else:
        out.append(say("{sent:,} requests", sent=w.get("sent") or 0))
    for key, said in (("input_tokens", say("prompts") if w.get("kind") != "multi-turn" else say("first turns")),
                      ("output_tokens", say("answers held to"))):
        if isinstance(v := w.get(key), dict) and v:
            out.append(say("{what}: median {median:,.0f} tokens, 99th percentile {p99:,.0f}, longest {max:,.0f}",
                           what=said, median=v.get("median", 0), p99=v.get("p99", 0), max=v.get("max", 0)))
    if w.get("tokenizer"):  # how the lengths were counted, said again in the report's language
        out.append(say("counted with the tokenizer of {model}", model=w["tokenizer"]))
    elif w.get("counted"):
        out.append(say("estimated at {n} characters a token (no tokenizer given)", n=CHARS_PER_TOKEN))
    if w.get("sha256"):
        out.append(say("file sha256 {sha}", sha=w["sha256"]))
    return out


def _together(runs: Sequence[RunResult]) -> list:
    """What the runs say together, as the pages say it: each set of repeats' spread (a repeat far off flagged) and a
    pair's two servers compared (engine.measure.judge.verdict); the charts' captions compare the sets."""
    out: list = []
    sets = [g for g in repeats.sets(runs) if len(g) > 1]
    for g in sets:
        for key in ("output_throughput", "mean_ttft_ms"):
            if (spread := repeats.of_runs(g, key)) is not None:
                out.append(say("{run}, {metric}: {spread}", run=g[0].label, metric=metric_info(key).label,
                               spread=spread.said))
                out += [say("{run}: {sentence}", run=g[0].label, sentence=m) for m in spread.outliers_said]
    pairs: dict[str, list] = {}
    for r in runs:
        if r.extra.side_by_side.pair:
            pairs.setdefault(r.extra.side_by_side.pair, []).append(r)
    for a, b in (p for p in pairs.values() if len(p) == 2):
        out += [v.said for v in verdict.of_pair([a], [b], *verdict.labels_apart(a, b, a.label, b.label))]
    return out


def _run_figures(run: RunResult, lang: str) -> list[go.Figure]:
    """The charts the Load test page draws for one run (the ceiling where its hardware and model say one)."""
    if not run.measured:
        return []
    figs = []
    if ceiling.run_ceiling(run) is not None:
        figs.append(ceiling_bars([run], lang=lang))
    if run.kind == "vllm":
        figs.append(request_timeline(run, lang=lang))
    figs.append(concurrent_latency_bars(run, lang=lang))
    if run.kind == "vllm":
        figs.append(throughput_over_time(run, lang=lang))
    return figs


def _num(v: float | None, digits: int | None = None) -> str:
    """A measurement in significant figures (engine.digits); a count with `digits` decimals."""
    return significant(v) if digits is None else "–" if v is None else f"{v:,.{digits}f}"


# System fonts only (the charts' own stack): a web font would be a network request.
_CSS = f"""
*{{box-sizing:border-box}}
body{{margin:0;background:#f6f6f4;color:{INK};font:16px/1.5 {FONT}}}
:lang(ko){{word-break:keep-all;overflow-wrap:anywhere}}
main{{max-width:1180px;margin:0 auto;padding:32px 28px 48px}}
header{{border-bottom:3px solid #0072B2;margin-bottom:24px}}
h1{{font-size:30px;margin:0 0 4px}}
h2{{font-size:24px;margin:0 0 16px}}
h3{{font-size:17px;margin:20px 0 8px;text-transform:uppercase;letter-spacing:.04em;color:#444}}
section{{background:white;border:1px solid #e3e3e3;border-radius:8px;padding:24px 28px;margin:0 0 28px}}
.muted{{color:{MUTED}}}
.cols{{display:grid;grid-template-columns:1fr 1fr;gap:8px 40px}}
.cols h3{{margin-top:0}}
dl{{display:grid;grid-template-columns:max-content 1fr;gap:4px 16px;margin:0}}
dt{{color:{MUTED}}}
dd{{margin:0;overflow-wrap:anywhere}}
table{{border-collapse:collapse;margin:4px 0 12px;font-size:15px}}
th,td{{border-bottom:1px solid #e3e3e3;padding:6px 14px 6px 0;text-align:left;vertical-align:top}}
thead th{{color:{MUTED};font-weight:600;border-bottom:2px solid #c8c8c8}}
tbody th{{font-weight:500}}
table.numbers td{{text-align:right;font-variant-numeric:tabular-nums}}
table.numbers thead th:not(:first-child){{text-align:right}}
table.flags td{{font-family:ui-monospace,'DejaVu Sans Mono',monospace}}
pre{{background:#f3f3f1;border-radius:6px;padding:10px 14px;font-size:13px;overflow-x:auto;white-space:pre-wrap}}
.tiles{{display:flex;flex-wrap:wrap;gap:12px;margin:4px 0 16px}}
.tile{{border:1px solid #e3e3e3;border-radius:6px;padding:8px 16px;min-width:150px}}
.tile b{{font-size:21px;font-variant-numeric:tabular-nums}}
.notes{{padding-left:20px}}
.notes li{{margin:4px 0}}
.findings li{{margin:8px 0;font-size:17px}}
figure{{margin:24px 0 8px}}
figcaption{{color:#333;font-size:15px;margin-top:4px;padding-left:10px;border-left:3px solid #0072B2}}
a{{color:#0072B2}}
footer{{font-size:14px;text-align:center}}
@media print{{body{{background:white}} section{{break-inside:avoid-page;border:none}}}}
"""
