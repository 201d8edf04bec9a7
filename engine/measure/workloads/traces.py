"""Trace replay: a Mooncake or Azure trace sent on its own clock times a time scale, its prefix reuse kept.
See docs/measuring.md#workloads."""
from __future__ import annotations

import csv
import functools
import hashlib
import io
import json
import math
import re
from dataclasses import dataclass
from datetime import datetime

from engine.measure.load.spec import MAX_TOKENS
from engine.measure.workloads.base import (
    MAX_FILE_BYTES,
    MAX_ROWS,
    Plan,
    Report,
    WorkloadError,
    length_summary,
    reported,
    uploaded_text,
)
from engine.measure.workloads.tokens import Tokens, estimated
from engine.messages import Message, mark, say

TIME_COLUMNS = ("timestamp", "time", "arrival_time", "created")
INPUT_COLUMNS = ("input_length", "input_tokens", "contexttokens", "prompt_tokens", "input_len")
OUTPUT_COLUMNS = ("output_length", "output_tokens", "generatedtokens", "completion_tokens", "output_len")
BLOCK_TOKENS = 512  # Mooncake's hash_ids each name a block of this many prompt tokens
MAX_SCALE = 1000.0


@dataclass(frozen=True)
class TraceRow:
    at_s: float  # seconds from the trace's first request
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class Trace:
    name: str
    rows: tuple[TraceRow, ...]
    sha256: str
    size_bytes: int
    time_unit: str  # how its timestamps were read: "ms" | "s" | "datetime"
    negative: bool = False  # some timestamps were below 0 (times count from the first row all the same)


def parse(data: bytes, name: str, time_unit: str = "ms", report: Report | None = None) -> Trace:
    """A trace file's rows; WorkloadError (one sentence) for the first problem. Numeric timestamps are in
    `time_unit` ("ms", Mooncake's, or "s"); a CSV's date-times (Azure's) are read as such."""
    if time_unit not in ("ms", "s"):
        raise WorkloadError(say("A trace's time unit is ms or s, not '{unit}'.", unit=time_unit))
    text = uploaded_text(data, name, too_big=say(
        "{name} is {mb:.0f} MB; a trace is read up to {limit} MB: upload a part of it.", name=name,
        mb=len(data) / 2**20, limit=MAX_FILE_BYTES // 2**20), binary=say(
        "{name} is a binary file, not text: give a JSONL or CSV trace.", name=name))
    items = _items(text, name)
    if not items:
        raise WorkloadError(say("{name} holds no requests: give one row per request.", name=name))
    if len(items) > MAX_ROWS:
        raise WorkloadError(say("{name} holds {n:,} rows; a trace takes up to {limit:,}: replay a part of it.",
                                name=name, n=len(items), limit=MAX_ROWS))
    keys = {str(k).strip().lower(): k for k in items[0]} if isinstance(items[0], dict) else {}
    col = {what: next((keys[c] for c in cols if c in keys), None)
           for what, cols in (("time", TIME_COLUMNS), ("in", INPUT_COLUMNS), ("out", OUTPUT_COLUMNS))}
    if None in col.values():
        raise WorkloadError(say("Row 1 of {name} lacks a timestamp, an input length or an output length: give "
                                "timestamp, input_length and output_length (Mooncake) or TIMESTAMP, ContextTokens "
                                "and GeneratedTokens (Azure).", name=name))
    times: list[float] = []
    rows: list[tuple[int, int, tuple[int, ...]]] = []
    unit = time_unit
    for i, item in enumerate(reported(items, report, mark("rows read")), 1):
        if not isinstance(item, dict):
            raise WorkloadError(say("Row {row} of {name} is not an object like the rows before it.", row=i, name=name))
        t, unit = _time(item.get(col["time"]), time_unit, i, name)
        if times and t < times[-1]:
            raise WorkloadError(say("Row {row} of {name} goes back in time (its timestamp is before the row above's): "
                                    "sort the trace by time.", row=i, name=name))
        times.append(t)
        rows.append((_length(item.get(col["in"]), mark("input"), i, name),
                     _length(item.get(col["out"]), mark("output"), i, name),
                     _hashes(item.get("hash_ids"), i, name)))
    t0 = times[0]
    return Trace(name=name, rows=tuple(TraceRow(t - t0, a, b, h) for t, (a, b, h) in zip(times, rows)),
                 sha256=hashlib.sha256(data).hexdigest(), size_bytes=len(data), time_unit=unit,
                 negative=unit != "datetime" and t0 < 0)


def _items(text: str, name: str) -> list:
    start = text.lstrip()[:1]
    if start == "{":
        out = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    out.append(json.loads(line))
                except ValueError as e:
                    raise WorkloadError(say("Line {line} of {name} is not JSON ({why}): give one JSON object per "
                                            "line.", line=n, name=name, why=str(e).split(":")[0])) from None
        return out
    if start == "[":
        try:
            obj = json.loads(text)
        except (ValueError, RecursionError) as e:
            raise WorkloadError(say("{name} is not JSON ({why}): give a list of objects, one per request.", name=name,
                                    why=str(e).split(":")[0])) from None
        return obj if isinstance(obj, list) else []
    try:
        return [dict(r) for r in csv.DictReader(io.StringIO(text))]
    except csv.Error as e:
        raise WorkloadError(say("{name} is not a readable CSV file ({why}): give a header row, then one row per "
                                "request.", name=name, why=str(e))) from None


_FRACTION = re.compile(r"(\.\d{6})\d+")


def _time(v, unit: str, row: int, name: str) -> tuple[float, str]:
    if isinstance(v, str) and not re.fullmatch(r"\s*[-+]?\d+(\.\d*)?\s*", v):
        try:  # Azure's "2023-11-16 18:15:46.6805900": seven digits of fraction, more than Python reads
            return datetime.fromisoformat(_FRACTION.sub(r"\1", v.strip())).timestamp(), "datetime"
        except ValueError:
            raise WorkloadError(say("Row {row} of {name} has a timestamp {value!r} that is neither a number nor a "
                                    "date and time.", row=row, name=name, value=v[:40])) from None
    try:
        t = float(v)
    except (TypeError, ValueError):
        t = math.nan
    if isinstance(v, bool) or not math.isfinite(t):
        raise WorkloadError(say("Row {row} of {name} has no timestamp: give each request its time.", row=row,
                                name=name))
    return (t / 1000 if unit == "ms" else t), unit


def _length(v, what: str, row: int, name: str) -> int:
    try:
        k = int(v) if not isinstance(v, bool) and float(v) == int(float(v)) else -1
    except (TypeError, ValueError, OverflowError):
        k = -1
    if not 1 <= k <= MAX_TOKENS:
        raise WorkloadError(say("Row {row} of {name} has an {what} length {value!r}: give a whole number of tokens "
                                "from 1 to {limit:,}.", row=row, name=name, what=what, value=str(v)[:40],
                                limit=MAX_TOKENS))
    return k


def _hashes(v, row: int, name: str) -> tuple[int, ...]:
    if v in (None, ""):
        return ()
    if isinstance(v, str):
        try:
            v = json.loads(v)
        except ValueError:
            v = None
    if not isinstance(v, list) or not all(isinstance(h, int) and not isinstance(h, bool) for h in v):
        raise WorkloadError(say("Row {row} of {name} has hash_ids that are not a list of whole numbers.", row=row,
                                name=name))
    return tuple(v)


@functools.lru_cache(maxsize=4096)
def _block(tokens: Tokens, h: int, size: int) -> str:
    return tokens.text_of(size, seed=10_000_019 + h)


def plan(trace: Trace, time_scale: float = 1.0, tokens: Tokens | None = None, n: int | None = None,
         block_tokens: int = BLOCK_TOKENS, report: Report | None = None) -> Plan:
    """The first `n` rows (all when None) as a schedule: each sent at its time × `time_scale`, its prompt made
    of its hash ids' blocks then text of its own, cut to its input length, its answer held to its output length."""
    if not isinstance(time_scale, (int, float)) or isinstance(time_scale, bool) or not 0 < time_scale <= MAX_SCALE:
        raise WorkloadError(say("The time scale must be above 0 and at most {limit:g} (0.5 replays twice as fast), "
                                "not {v}.", limit=MAX_SCALE, v=time_scale))
    tokens = tokens or estimated()
    rows = trace.rows[:n] if n else trace.rows
    prompts = []
    for i, r in enumerate(reported(rows, report, mark("prompts made"))):
        shared = " ".join(_block(tokens, h, block_tokens) for h in r.hash_ids)
        own = tokens.text_of(r.input_tokens, seed=20_000_003 + i)  # unique from here on: no accidental reuse
        prompts.append(tokens.cut((shared + " " + own).strip() if shared else own, r.input_tokens))
    counted = [tokens.count(p) for p in prompts]
    outs = [r.output_tokens for r in rows]
    gaps = [b.at_s - a.at_s for a, b in zip(rows, rows[1:])]
    positive = sorted(g for g in gaps if g > 0)
    summary = {"kind": "trace", "name": trace.name, "rows": len(trace.rows), "sent": len(rows),
               "sha256": trace.sha256, "size_bytes": trace.size_bytes, "time_scale": time_scale,
               "time_unit": trace.time_unit, "span_s": rows[-1].at_s * time_scale if rows else 0.0,
               # what checks() reads: the file's own clock (unscaled), before anything is sent
               "same_time": sum(g == 0 for g in gaps), "negative_times": trace.negative,
               "median_gap_s": positive[len(positive) // 2] if positive else None,
               "shared_blocks": sum(bool(r.hash_ids) for r in rows), "block_tokens": block_tokens,
               "input_tokens": length_summary(counted), "output_tokens": length_summary(outs),
               "counted": str(tokens.said()), "tokenizer": tokens.source}
    return Plan("trace", prompts, summary, max_tokens_each=outs, offsets=[r.at_s * time_scale for r in rows],
                input_tokens=counted, output_tokens=outs)


# A trace's median gap between arrivals, in seconds as read, outside which its unit is likely wrong: under a
# millisecond (numbers in seconds read as milliseconds) or over a minute (milliseconds read as seconds, or
# microseconds read as milliseconds). Chat traffic's gaps (Mooncake, Azure) lie between.
PLAUSIBLE_GAP_S = (0.001, 60.0)
LONG_REPLAY_S = 600.0  # a replay longer than this is said with what a smaller time scale would make of it
FAST_RATE = 500.0  # requests a second on average beyond which a replay is said to outrun a client and a server


def duration_said(summary: dict) -> Message:
    """How long the replay takes at its time scale, in one line: the preview's and the CLI's."""
    return say("{n:,} requests over {span} at time scale {scale:g}.", n=summary.get("sent") or 0,
               span=_span(summary.get("span_s") or 0.0), scale=summary.get("time_scale") or 1.0)


def checks(summary: dict) -> list[Message]:
    """What looks wrong in a trace's timestamps, from its plan's summary (said before anything is sent): all
    or many at the same time, negative ones, a unit that is likely wrong (with the likely one), a replay that
    takes very long or sends faster than anything answers. [] when nothing does."""
    out: list[Message] = []
    n, span = summary.get("sent") or 0, summary.get("span_s") or 0.0
    scale, unit, gap = summary.get("time_scale") or 1.0, summary.get("time_unit"), summary.get("median_gap_s")
    same = summary.get("same_time") or 0
    if n > 1 and span == 0:
        out.append(say("Every timestamp of {name} is the same, so all {n:,} requests go out at once: a burst, not a "
                       "replay. Check the timestamp column.", name=summary.get("name"), n=n))
    elif n > 1 and same >= (n - 1) / 2:
        out.append(say("{same:,} of the {n:,} requests of {name} share their timestamp with the one before, so they "
                       "go out together: check that the timestamps are not rounded to whole seconds or minutes.",
                       same=same, n=n, name=summary.get("name")))
    if summary.get("negative_times"):
        out.append(say("{name} has negative timestamps: the replay counts from its first row all the same, but check "
                       "that the column is a time.", name=summary.get("name")))
    if gap is not None and unit in ("ms", "s"):
        low, high = PLAUSIBLE_GAP_S
        if unit == "ms" and gap < low:
            out.append(say("The requests of {name} arrive {gap} apart on the median, read as milliseconds: its "
                           "timestamps are likely seconds. Read them as seconds (time unit s), or the replay runs a "
                           "thousand times too fast.", name=summary.get("name"), gap=_span(gap)))
        elif unit == "s" and gap > high:
            out.append(say("The requests of {name} arrive {gap} apart on the median, read as seconds: its timestamps "
                           "are likely milliseconds. Read them as milliseconds (time unit ms), or the replay runs a "
                           "thousand times too slow.", name=summary.get("name"), gap=_span(gap)))
        elif unit == "ms" and gap > high:
            out.append(say("The requests of {name} arrive {gap} apart on the median, read as milliseconds: its "
                           "timestamps are likely microseconds. Replay it at time scale 0.001 to keep its own pace.",
                           name=summary.get("name"), gap=_span(gap)))
    if span > LONG_REPLAY_S:
        out.append(say("The replay takes {span} at time scale {scale:g}: a time scale of {less:g} replays it in "
                       "{shorter}.", span=_span(span), scale=scale, less=scale / 10, shorter=_span(span / 10)))
    if n > 1 and span > 0 and n / span > FAST_RATE:
        out.append(say("At time scale {scale:g} the replay sends {rate:,.0f} requests a second on average, more than a "
                       "server answers: the client holds as many connections as its open-file limit allows and the "
                       "rest wait, so the replay falls behind its clock. A larger time scale keeps to it.",
                       scale=scale, rate=n / span))
    return out


def _span(s: float) -> Message:
    """A length of time as a person reads it: '0.4 ms', '15.5 s', '12 min', '2 h 5 min'."""
    if s < 1:
        return say("{x:,.1f} ms", x=s * 1000)
    if s < 120:
        return say("{x:,.1f} s", x=s)
    if s < 7200:
        return say("{x:,.0f} min", x=s / 60)
    return say("{h} h {m} min", h=int(s // 3600), m=int(s % 3600 // 60))
