"""Your own dataset as a workload: JSONL, JSON or CSV bytes, checked and sampled into a `Plan`.
See docs/measuring.md#workloads."""
from __future__ import annotations

import csv
import hashlib
import io
import json
import random
from dataclasses import dataclass
from typing import Any

from engine.measure.load.spec import MAX_REQUESTS, MAX_TOKENS
from engine.measure.workloads.base import (
    MAX_FILE_BYTES,
    MAX_PROMPT_CHARS,
    MAX_ROWS,
    Plan,
    Report,
    WorkloadError,
    length_summary,
    reported,
    uploaded_text,
)
from engine.measure.workloads.tokens import Tokens, estimated
from engine.messages import mark, say

PROMPT_COLUMNS = ("prompt", "text", "input", "question")
OUTPUT_COLUMNS = ("output_tokens", "output_len", "output_length", "max_tokens", "completion_tokens")
HUMAN = ("human", "user")
REPLY = ("gpt", "assistant", "chatgpt", "bard", "bing", "model")


@dataclass(frozen=True)
class Row:
    prompt: str  # what a single-turn request sends
    turns: tuple[str, ...]  # every human turn, in order (a multi-turn chat's user messages)
    reply: str | None = None  # the answer after the first human turn, when the file has one
    output_tokens: int | None = None  # the file's own answer length for this row


@dataclass(frozen=True)
class Dataset:
    name: str  # the file's name as given (never read as a path)
    format: str  # "jsonl" | "json" | "csv"
    layout: str  # "column:<name>" | "sharegpt" | "messages" | "strings"
    rows: tuple[Row, ...]
    sha256: str
    size_bytes: int


def parse(data: bytes, name: str, report: Report | None = None) -> Dataset:
    """The rows of a dataset file's content; WorkloadError (one sentence) for the first problem. `report` hears
    how far the rows are read."""
    text = uploaded_text(data, name, too_big=say(
        "{name} is {mb:.0f} MB; a dataset is read up to {limit} MB: upload the first part or a sample of it.",
        name=name, mb=len(data) / 2**20, limit=MAX_FILE_BYTES // 2**20), binary=say(
        "{name} is a binary file, not text: give a JSONL, JSON or CSV file of prompts.", name=name))
    fmt = _format(name, text)
    items = _items(fmt, text, name)
    if not items:
        raise WorkloadError(say("{name} holds no rows: give a file with at least one prompt.", name=name))
    if len(items) > MAX_ROWS:
        raise WorkloadError(say("{name} holds {n:,} rows; a dataset takes up to {limit:,}: sample it first.",
                                name=name, n=len(items), limit=MAX_ROWS))
    layout = _layout(items[0], name)
    rows = tuple(_row(item, layout, i + 1, name) for i, item in enumerate(reported(items, report, mark("rows read"))))
    return Dataset(name=name, format=fmt, layout=layout, rows=rows, sha256=hashlib.sha256(data).hexdigest(),
                   size_bytes=len(data))


def _format(name: str, text: str) -> str:
    low = name.lower()
    if low.endswith(".csv"):
        return "csv"
    if low.endswith((".jsonl", ".ndjson")):
        return "json" if text.lstrip()[:1] == "[" else "jsonl"  # a JSON list saved under .jsonl: read as JSON
    if low.endswith(".json"):
        start = text.lstrip()[:1]
        return "json" if start in ("[", "") else "jsonl" if start == "{" and "\n{" in text.strip() else "json"
    start = text.lstrip()[:1]
    return "json" if start == "[" else "jsonl" if start == "{" else "csv"


def _items(fmt: str, text: str, name: str) -> list[Any]:
    if fmt == "csv":
        try:
            reader = csv.DictReader(io.StringIO(text))
            return [dict(r) for r in reader]
        except csv.Error as e:
            raise WorkloadError(say("{name} is not a readable CSV file ({why}): give a header row, then one row "
                                    "per prompt.", name=name, why=str(e))) from None
    if fmt == "jsonl":
        out = []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                out.append(json.loads(line))
            except ValueError as e:
                raise WorkloadError(say("Line {line} of {name} is not JSON ({why}): give one JSON object per line.",
                                        line=n, name=name, why=str(e).split(":")[0])) from None
        return out
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise WorkloadError(say("{name} is not JSON ({why}): give a list of objects, one per prompt.", name=name,
                                why=str(e).split(":")[0])) from None
    if isinstance(obj, dict):
        lists = [v for v in obj.values() if isinstance(v, list)]
        obj = obj.get("data", lists[0] if len(lists) == 1 else None)
    if not isinstance(obj, list):
        raise WorkloadError(say("{name} is JSON but not a list of rows: give a list of objects, one per prompt.",
                                name=name))
    return obj


def _layout(first: Any, name: str) -> str:
    """Where the prompt is, judged from the first row (every row is then held to it)."""
    if isinstance(first, str):
        return "strings"
    if not isinstance(first, dict):
        raise WorkloadError(say("Row 1 of {name} is not an object: give one object per row with a prompt field.",
                                name=name))
    if isinstance(first.get("conversations"), list):
        return "sharegpt"
    if isinstance(first.get("messages"), list):
        return "messages"
    lower = {str(k).strip().lower(): k for k in first}
    for col in PROMPT_COLUMNS:
        if col in lower:
            return f"column:{lower[col]}"
    has = ", ".join(str(k) for k in list(first)[:8]) or say("no fields")
    raise WorkloadError(say("Row 1 of {name} has no prompt: name its column prompt, text, input or question, or give "
                            "ShareGPT conversations or OpenAI messages (it has: {has}).", name=name, has=has))


def _row(item: Any, layout: str, n: int, name: str) -> Row:
    if layout == "strings":
        if not isinstance(item, str):
            raise WorkloadError(say("Row {row} of {name} is not a string like the rows before it.", row=n, name=name))
        return Row(_prompt(item, n, name), (item,))
    if not isinstance(item, dict):
        raise WorkloadError(say("Row {row} of {name} is not an object like the rows before it.", row=n, name=name))
    out = _output_tokens(item, n, name)
    if layout.startswith("column:"):
        text = item.get(layout.split(":", 1)[1])
        if not isinstance(text, str) or not text.strip():
            raise WorkloadError(say("Row {row} of {name} has an empty {column}: give every row a prompt, or leave "
                                    "the row out.", row=n, name=name, column=layout.split(":", 1)[1]))
        text = _prompt(text, n, name)
        return Row(text, (text,), output_tokens=out)
    turns = item.get("conversations" if layout == "sharegpt" else "messages")
    if not isinstance(turns, list):
        raise WorkloadError(say("Row {row} of {name} has no {field} list like the rows before it.", row=n, name=name,
                                field="conversations" if layout == "sharegpt" else "messages"))
    humans: list[str] = []
    reply = None
    for t in turns:
        if not isinstance(t, dict):
            continue
        who = str(t.get("from", t.get("role", ""))).lower()
        said = t.get("value", t.get("content"))
        if not isinstance(said, str):
            continue
        if who in HUMAN and said.strip():
            humans.append(_prompt(said, n, name))
        elif who in REPLY and len(humans) == 1 and reply is None:
            reply = said
    if not humans:
        raise WorkloadError(say("Row {row} of {name} has no human or user turn to send: give each conversation at "
                                "least one, or leave the row out.", row=n, name=name))
    return Row(humans[0], tuple(humans), reply, out)


def _prompt(text: str, n: int, name: str) -> str:
    if len(text) > MAX_PROMPT_CHARS:
        raise WorkloadError(say("Row {row} of {name} holds a prompt of {chars:,} characters; a prompt may have up to "
                                "{limit:,}: shorten it, or leave the row out.", row=n, name=name, chars=len(text),
                                limit=MAX_PROMPT_CHARS))
    return text


def _output_tokens(item: dict, n: int, name: str) -> int | None:
    for col in OUTPUT_COLUMNS:
        if col in item and item[col] not in (None, ""):
            v = item[col]
            try:
                k = int(v) if not isinstance(v, bool) and float(v) == int(float(v)) else None
            except (TypeError, ValueError):
                k = None
            if k is None or not 1 <= k <= MAX_TOKENS:
                raise WorkloadError(say("Row {row} of {name} gives {column} {value!r}: give a whole number of tokens "
                                        "from 1 to {limit:,}, or leave it empty.", row=n, name=name, column=col,
                                        value=str(v)[:40], limit=MAX_TOKENS))
            return k
    return None


def sample(ds: Dataset, n: int | None = None, how: str = "first", seed: int = 0) -> list[Row]:
    """`n` rows (all when None or more than there are): the first ones, or a seeded random choice in file order."""
    rows = list(ds.rows)
    if n is None or n >= len(rows):
        return rows
    if n < 1:
        raise WorkloadError(say("Take at least one row of the dataset, not {n}.", n=n))
    if how == "first":
        return rows[:n]
    if how != "random":
        raise WorkloadError(say("Sampling is 'first' or 'random', not '{how}'.", how=how))
    keep = sorted(random.Random(seed).sample(range(len(rows)), n))
    return [rows[i] for i in keep]


def plan(ds: Dataset, n: int | None = None, how: str = "first", seed: int = 0, tokens: Tokens | None = None,
         output_from_reply: bool = False, max_tokens: int | None = None, report: Report | None = None) -> Plan:
    """A dataset as a single-turn workload: one request per sampled row, each with its answer length when the
    file gives one (its output column, or with `output_from_reply` the reply's length in tokens); rows without
    one get `max_tokens` (the spec's when None)."""
    tokens = tokens or estimated()
    rows = sample(ds, n, how, seed)
    if len(rows) > MAX_REQUESTS:  # said before a minute of counting, not after it
        raise WorkloadError(say("{name} holds {n:,} rows, and a load test sends at most {limit:,} requests: take a "
                                "part of them (--num-prompts on the CLI, 'Prompts to send' on the page).", name=ds.name,
                                n=len(rows), limit=MAX_REQUESTS))
    lengths: list[int | None] = []
    for r in rows:
        k = r.output_tokens
        if k is None and output_from_reply and r.reply:
            k = max(1, tokens.count(r.reply))
        lengths.append(k if k is not None else max_tokens)
    known = [k for k in lengths if k is not None]
    each = [int(k) for k in known] if lengths and len(known) == len(lengths) else None
    if each is None and any(k is not None for k in lengths):
        raise WorkloadError(say("Some rows of {name} give an answer length and some do not: give max tokens for the "
                                "rest.", name=ds.name))
    inputs = [tokens.count(r.prompt) for r in reported(rows, report, mark("prompts counted"))]
    summary = {"kind": "dataset", "name": ds.name, "format": ds.format, "layout": ds.layout, "rows": len(ds.rows),
               "sent": len(rows), "sampling": how if n is not None and n < len(ds.rows) else "all", "seed": seed,
               "sha256": ds.sha256, "size_bytes": ds.size_bytes, "input_tokens": length_summary(inputs),
               "output_tokens": length_summary(each or []), "counted": str(tokens.said()), "tokenizer": tokens.source,
               "output_from": "column" if any(r.output_tokens for r in rows) else
                              "reply" if output_from_reply and each else "max_tokens"}
    return Plan("dataset", [r.prompt for r in rows], summary, max_tokens_each=each, input_tokens=inputs,
                output_tokens=each or [])
