"""Runs side by side as a table (History's "Compare"), from the per-run CSV export's own row, so the two never
disagree. See docs/internals.md#exchange."""
from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import Any

from engine.digits import significant
from engine.messages import mark, say, translate, when
from engine.results.exchange import run_row
from engine.results.records import RunResult, is_sane_time
from engine.serving import models

# (row name, run_row key, decimals): None a measurement, in significant figures (engine.digits); 0 a count
_NUMBERS = (
    (say("Requests completed"), "completed", 0), (say("Requests failed"), "failed", 0),
    (say("Wall time (s)"), "duration", None), (say("Output tokens / s"), "output_throughput", None),
    (say("Requests / s"), "request_throughput", None), (say("Most in flight"), "peak_in_flight", 0),
    (say("Mean TTFT (ms)"), "mean_ttft_ms", None), (say("P99 TTFT (ms)"), "p99_ttft_ms", None),
    (say("Mean TPOT (ms)"), "mean_tpot_ms", None), (say("Mean E2E latency (ms)"), "mean_e2el_ms", None),
    (say("Output tokens"), "total_output_tokens", 0),
)
# the server's command line without what only says where it listens or which files it read
_NOT_FLAGS = {"--host", "--port", "--model", "--served-model-name"}


def flags(command: str) -> str:
    """The settings of a server's command line: its environment variables and flags (with their values),
    without the interpreter, the module, the model's path and the address (the run's other rows say those)."""
    try:
        words = shlex.split(command)
    except ValueError:
        return command
    out: list[str] = []
    i = 0
    while i < len(words):
        w = words[i]
        value = words[i + 1] if i + 1 < len(words) and not words[i + 1].startswith("--") else None
        if w.startswith("--"):
            if w not in _NOT_FLAGS:
                out += [w] if value is None else [w, value]
            i += 1 if value is None else 2
            continue
        if "=" in w and not out:  # VLLM_CPU_KVCACHE_SPACE=2 before the interpreter
            out.append(w)
        i += 1
    return " ".join(out)


def _num(v: Any, digits: int | None, lang: str) -> str:
    if v is None or isinstance(v, str):
        return "–" if v in (None, "") else str(v)
    if digits is None:
        return significant(float(v))
    from babel.numbers import format_decimal  # ~0.1 s to import, paid only when a table is drawn

    return format_decimal(round(float(v), digits), format=f"#,##0{'.' + '0' * digits if digits else ''}",
                          locale="ko_KR" if lang == "ko" else "en_US")


def compare_table(runs: Sequence[RunResult], *, lang: str = "en") -> tuple[list[str], list[dict[str, str]]]:
    """(column names, rows) for runs side by side: the first column names the row, then one column per
    run ("1. its label", numbered so two runs of one label stay two columns)."""
    runs = list(runs)
    cols = [f"{i}. {translate(r.label, lang) or r.scenario}" for i, r in enumerate(runs, 1)]
    data = [run_row(r) for r in runs]
    what = translate(say("Compared"), lang)
    rows: list[dict[str, str]] = []

    def add(name, values) -> None:
        rows.append({what: translate(name, lang), **dict(zip(cols, values))})

    add(say("Started"), [when(r.started_at, lang) if is_sane_time(r.started_at) else translate(mark("unknown"), lang)
                         for r in runs])  # as the History table beside it writes a time
    add(say("Kind"), [r.kind for r in runs])
    add(say("Model"), [models.shown_name(r.model) or "–" for r in runs])
    for name, key, digits in _NUMBERS:
        add(name, [_num(d.get(key), digits, lang) for d in data])
    warmth = {"cold": say("❄ cold"), "warm": say("warm"), "": say("not known")}
    add(say("Cold / warm"), [translate(warmth[d["warmth"]], lang) for d in data])
    add(say("Flags"), [flags(r.command) or "–" for r in runs])
    where = {"this app's server": say("this app's server"), "imported": say("imported")}
    add(say("Where it ran"), [translate(where[d["server"]], lang) if d["server"] in where else d["server"]
                              for d in data])
    add(say("Hardware"), [d["hardware"] or "–" for d in data])
    return [what, *cols], rows
