"""The Python behind a workload run (a dataset, lengths, a multi-turn chat, a trace) through the openai SDK's
AsyncOpenAI. See docs/internals.md#snippets."""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from engine.errors import ConfigError
from engine.measure.load.spec import POOLING, LoadSpec
from engine.measure.snippets.python import (WIDTH, Comments, client, comment, lit, paced_beyond_code, request_call,
                                            shape_lines, shape_of, tokens_used)
from engine.measure.workloads.named import named
from engine.measure.workloads.conversations import FOLLOW_UPS
from engine.measure.workloads import fixed_text
from engine.measure.workloads.kinds import EXAMPLES
from engine.measure.workloads.tokens import CHARS_PER_TOKEN
from engine.measure.workloads.lengths import shapes
from engine.messages import Message, say

MAX_LINES = 50
OUTPUT_COLUMNS = ("output_tokens", "output_len", "output_length", "max_tokens", "completion_tokens")


def workload_code(run: Any, lang: str = "en") -> str | None:
    """The code of a stored workload run (its Load.workload); None for a kind, file layout or arrival it cannot
    write as the run sent it."""
    load, w = run.load, run.load.workload or {}
    kind = w.get("kind")
    if run.kind != "vllm" or not load.base_url or not run.model:
        return None
    if load.shape not in ("concurrency", "burst", "sequential", "poisson", "trace") or paced_beyond_code(load):
        return None
    if (spec := _request(run)) is None:
        return None
    c = Comments(lang)
    keyed = bool(run.config.get("api_key")) or run.extra.server.keyed
    head = [*comment(c, say("{what}: what this run sent, with the openai SDK.", what=named(w))),
            "import asyncio, csv, itertools, json, math, os, random, time", "from openai import AsyncOpenAI", "",
            *client("AsyncOpenAI", load.base_url, keyed, c), f"MODEL = {lit(run.model)}"]
    body: list  # lines, None where a part cannot be written as the run sent it
    if kind == "dataset":
        body = _file_lines(w, c) + _prompts_of_rows(w) + _sampled(w) + _dataset_lengths(w, load)
    elif kind == "lengths":
        body = _drawn(w, load, c)
    elif kind == "prefix-repetition":
        body = _shared(w, c)
    elif kind == "fixed-text":
        body = _text_lines(w, c)
    elif kind == "hub":
        body = _hub_lines(w) + _prompts_of_rows(w) + _sampled(w) + _dataset_lengths(w, load)
    elif kind == "multi-turn":
        return _chat_code(run, spec, w, head, c)
    elif kind == "trace":
        if w.get("time_unit") != "ms" or not str(w.get("name", "")).lower().endswith((".jsonl", ".ndjson")):
            return None  # the Mooncake shape only: Azure's date-times would need their own reading
        body = _trace_lines(w, c)
    else:
        return None
    lines = [line for line in body if line is not None]
    if len(lines) < len(body):  # a part it cannot write as the run sent it
        return None
    return "\n".join(head + lines + _send(load, spec, c, trace=kind == "trace")) + "\n"


def _request(run: Any) -> LoadSpec | None:
    """How each request of a stored run was sent (its endpoint, sampling, headers by name, extra body, LoRA modules
    and their assignment), as a LoadSpec the shared request writer reads; None where its record does not make one."""
    load = run.load
    endpoint = load.endpoint or "chat"
    try:
        return LoadSpec(base_url=load.base_url, model=run.model, prompts=["-"], max_tokens=load.max_tokens,
                        ignore_eos=bool(load.ignore_eos) and endpoint not in POOLING, endpoint=endpoint,
                        temperature=0.7 if load.temperature is None else load.temperature,
                        seed=int(load.other.get("seed") or 0), **shape_of(load))
    except (ConfigError, TypeError, ValueError):
        return None


def _file_named(name: str, w: dict, c: Comments, shipped_said: Message, elsewhere_said: Message) -> list[str]:
    """`FILE = ...`: the shipped copy where the run sent it (its sha256 the same), else the name, with a comment
    asking for the file beside the code."""
    shipped = EXAMPLES / name
    if shipped.is_file() and hashlib.sha256(shipped.read_bytes()).hexdigest() == w.get("sha256"):
        return [f"FILE = {lit(str(shipped))}" + c.inline(shipped_said)]
    return [*comment(c, elsewhere_said), f"FILE = {lit(name)}"]


def _file_lines(w: dict, c: Comments) -> list[str]:
    """FILE and its rows, read as the run read it (JSONL, a JSON list, CSV)."""
    name = str(w.get("name") or "")
    lines = _file_named(name, w, c, say("the shipped example this run sent"),
                        say("The file this run sent (sha256 {sha}…): put it beside this code.",
                            sha=str(w.get("sha256", ""))[:12]))
    fmt = w.get("format") or ("csv" if name.lower().endswith(".csv") else "jsonl")
    if fmt == "csv":
        read = 'rows = list(csv.DictReader(open(FILE, encoding="utf-8-sig", newline="")))'
    elif fmt == "json":
        read = 'rows = json.load(open(FILE, encoding="utf-8-sig"))'
        return lines + [read, "rows = rows if isinstance(rows, list) else rows.get(\"data\") or next(v for v in "
                              "rows.values() if isinstance(v, list))"]
    else:
        read = 'rows = [json.loads(line) for line in open(FILE, encoding="utf-8-sig") if line.strip()]'
    return lines + [read]


def _text_lines(w: dict, c: Comments) -> list[str]:
    """A fixed text's prompts: its first prefix_len tokens shared, then its lines drawn with the run's seed, each
    prompt about input_len tokens (CHARS_PER_TOKEN characters a token; the run cut them exact with the model's
    tokenizer, so the draws differ from the run's after the opening)."""
    lines = _file_named(str(w.get("file") or fixed_text.SHIPPED), w, c, say("the shipped text this run sent"),
                        say("The text this run sent (sha256 {sha}…): put it beside this code.",
                            sha=str(w.get("sha256", ""))[:12]))
    head, size = int(w.get("prefix_len") or 0) * CHARS_PER_TOKEN, int(w.get("input_len") or 1) * CHARS_PER_TOKEN
    return [*lines, 'LINES = [line.strip() for line in open(FILE, encoding="utf-8-sig") if line.strip()]',
            f"N, rng = {w.get('sent')}, random.Random({w.get('seed', 0)})",
            *comment(c, say("Prompts of about {n} tokens ({k} characters a token; the run cut them exact with the "
                            "model's tokenizer): the text's first {p} shared, then its lines drawn at random.",
                            n=w.get("input_len"), k=CHARS_PER_TOKEN, p=w.get("prefix_len"))),
            f'HEAD = "\\n".join(LINES)[:{head}] + "\\n"' if head else 'HEAD = ""',
            "PROMPTS = []", "for _ in range(N):", "    body = HEAD", f"    while len(body) < {size}:",
            '        body += rng.choice(LINES) + "\\n"', f"    PROMPTS.append(body[:{size}])",
            f"LENGTHS = [{w.get('output_len')}] * N"]


def _hub_lines(w: dict) -> list[str]:
    """A Hugging Face dataset's split as rows, loaded as the run loaded it (by name from the Hub or its cache, or a
    folder written by save_to_disk), its prompt column renamed as the run read it."""
    name, split, subset = str(w.get("dataset") or ""), str(w.get("split") or "train"), w.get("subset")
    if Path(name).expanduser().is_dir():  # a folder saved with save_to_disk, as the run read it
        lines = ["from datasets import DatasetDict, load_from_disk", f"ds = load_from_disk({lit(name)})",
                 f"rows = list(ds[{lit(split)}] if isinstance(ds, DatasetDict) else ds)"]
    else:
        sub = f", {lit(subset)}" if subset else ""
        lines = ["from datasets import load_dataset",
                 f"rows = list(load_dataset({lit(name)}{sub}, split={lit(split)}))"]
    if column := w.get("column"):
        lines.append(f"rows = [{{\"prompt\": row[{lit(str(column))}]}} for row in rows]")
    return lines


def _turns_expr(layout: str) -> str | None:
    """A row's user turns, in order, as the layout the run found holds them."""
    if layout == "strings":
        return "[row]"
    if layout.startswith("column:"):
        return f"[row[{lit(layout.split(':', 1)[1])}]]"
    if layout == "sharegpt":
        return '[t["value"] for t in row["conversations"] if t.get("from", "").lower() in HUMAN and t["value"].strip()]'
    if layout == "messages":
        return '[m["content"] for m in row["messages"] if m.get("role") == "user" and m["content"].strip()]'
    return None


def _human(layout: str) -> list[str]:
    return ['HUMAN = ("human", "user")'] if layout == "sharegpt" else []


def _prompts_of_rows(w: dict) -> list[str | None]:
    layout = str(w.get("layout", ""))
    if layout == "strings":
        return ["PROMPTS = list(rows)"]
    if layout.startswith("column:"):
        return [f"PROMPTS = [row[{lit(layout.split(':', 1)[1])}] for row in rows]"]
    turns = _turns_expr(layout)
    return [None] if turns is None else [*_human(layout), f"PROMPTS = [{turns}[0]", "           for row in rows]"]


def _sampled(w: dict) -> list[str]:
    """The rows the run took: all, the first N, or N at random with its seed (datasets.sample's choice)."""
    n, how = w.get("sent"), w.get("sampling", "all")
    if how == "first":
        return [f"rows, PROMPTS = rows[:{n}], PROMPTS[:{n}]"]
    if how == "random":
        return [f"keep = sorted(random.Random({w.get('seed', 0)}).sample(range(len(rows)), {n}))",
                "rows, PROMPTS = [rows[i] for i in keep], [PROMPTS[i] for i in keep]"]
    return []


def _dataset_lengths(w: dict, load) -> list[str]:
    """LENGTHS: each answer's max_tokens (the file's own column, else the run's)."""
    top = load.max_tokens if load.max_tokens is not None else "None"
    if w.get("output_from") == "column":
        return [f"COLUMNS = {OUTPUT_COLUMNS!r}",
                f"LENGTHS = [next((int(float(row[k])) for k in COLUMNS if row.get(k) not in (None, \"\")), {top}) "
                "for row in rows]"]
    return [f"LENGTHS = [{top}] * len(PROMPTS)"]


def _draw(d: dict | None, side: str) -> str | None:
    """The draws of one side, as lengths.Lengths.draw makes them (the same calls on the same generator)."""
    if d is None:
        return None
    kind, lo, hi = d.get("kind"), int(d.get("low", 1)), int(d.get("high", 1))
    if kind == "fixed":
        return f"[{round(d['mean'])}] * N"
    if kind == "uniform":
        return f"[rng.randint({lo}, {hi}) for _ in range(N)]"
    if kind == "normal":
        return f"[min({hi}, max({lo}, round(rng.gauss({d['mean']:g}, {d['stdev']:g})))) for _ in range(N)]"
    if kind == "chat-like":
        p = shapes()["chat-like"][side]
        lo, hi = max(lo, p["min"]), min(hi, p["max"])
        return (f"[min({hi}, max({lo}, round(rng.lognormvariate(math.log({p['median']}), {p['sigma']})))) "
                "for _ in range(N)]")
    return None


def _drawn(w: dict, load, c: Comments) -> list[str | None]:
    n, ins = w.get("sent"), _draw(w.get("inputs"), "input")
    outs = _draw(w.get("outputs"), "output") if w.get("outputs") else None
    top = load.max_tokens if load.max_tokens is not None else "None"
    return [f"N, rng = {n}, random.Random({w.get('seed', 0)})" + c.inline(say("the run's seed: the same lengths")),
            f"INPUTS = {ins}",
            f"LENGTHS = {outs}" if outs else f"LENGTHS = [{top}] * N",
            *comment(c, say("Prompts of about these many tokens (a word a token; the run made them exact with the "
                             "model's tokenizer), each its own from the first word, as the run's were.")),
            *(['PREFIX = "Shared: " + "word " * ' + f"{int(w['prefix_len']) - 2}",
               'PROMPTS = [PREFIX + f"Request {i}: " + "word " * (k - 3) for i, k in enumerate(INPUTS)]']
              if w.get("prefix_len") else
              ['PROMPTS = [f"Request {i}: " + "word " * (k - 3) for i, k in enumerate(INPUTS)]'])]


def _shared(w: dict, c: Comments) -> list[str]:
    """A shared-prefix run's requests: its prefixes, which request opens with which (shuffled as the run's were, not
    by the same draws), each request's own suffix, its answer length."""
    k, p, s = w.get("num_prefixes"), int(w.get("prefix_len") or 1), int(w.get("suffix_len") or 1)
    return [f"N, K, rng = {w.get('sent')}, {k}, random.Random({w.get('seed', 0)})",
            *comment(c, say("K prefixes of about {p} tokens (a word a token; the run made them exact with the model's "
                            "tokenizer), each request's own suffix of about {s} after one.", p=p, s=s)),
            f'PREFIXES = [f"Prefix {{j}}: " + "word " * {max(0, p - 3)} for j in range(K)]',
            "WHICH = [i % K for i in range(N)]",
            "rng.shuffle(WHICH)",
            f'PROMPTS = [PREFIXES[j] + f" Request {{i}}: " + "word " * {max(0, s - 3)}',
            "           for i, j in enumerate(WHICH)]",
            f"LENGTHS = [{w.get('output_len')}] * N"]


def _trace_lines(w: dict, c: Comments) -> list[str]:
    lines = _file_lines({**w, "format": "jsonl"}, c)
    n = w.get("sent")
    return lines + [*([f"rows = rows[:{n}]"] if n and n < (w.get("rows") or n) else []),
                    f"SCALE = {w.get('time_scale', 1.0):g}" + c.inline(say("the run's time scale: 0.5 is twice as "
                                                                           "fast")),
                    'AT = [(row["timestamp"] - rows[0]["timestamp"]) / 1000 * SCALE for row in rows]',
                    *comment(c, say("Each prompt about its input length (a word a token); the run made it exact "
                                     "and shared the hash ids' blocks between requests.")),
                    'PROMPTS = [f"Request {i}: " + "word " * (row["input_length"] - 3) for i, row in enumerate(rows)]',
                    'LENGTHS = [row["output_length"] for row in rows]']


def _send(load, spec: LoadSpec, c: Comments, trace: bool) -> list[str]:
    """PROMPTS[i] with LENGTHS[i] sent as the run's arrival did, in the request's shape (its endpoint, sampling,
    headers, extra body, LoRA module: python.request_call, as the Load test's code writes it), then what it
    measured."""
    if trace:
        gate, wait = [], ["    await asyncio.sleep(AT[i])" + c.inline(say("on the trace's clock"))]
    elif load.shape == "poisson":
        b = load.burstiness or 1
        gate = [f"RATE, B = {load.rate:g}, {b:g}" + c.inline(say("requests/s; B is vllm bench serve's --burstiness "
                                                                 "(1: Poisson)")),
                "AT = list(itertools.accumulate(random.gammavariate(B, 1 / (RATE * B)) for _ in PROMPTS))"]
        wait = ["    await asyncio.sleep(AT[i])"]
    else:
        n = 1 if load.shape == "sequential" else len(load.prompts) if load.shape == "burst" else load.concurrency or 1
        gate = [f"IN_FLIGHT = asyncio.Semaphore({n})" + c.inline(say("at most {n} at a time", n=n))]
        wait = []
    ramp = load.other.get("ramp_up_s") if isinstance(load.other, dict) else None
    note = comment(c, say("The run ramped up over {s:g} s; this code starts at the full load.",
                           s=ramp)) if ramp else []
    inner = [*(["    model = model_for(i)"] if spec.lora_modules else []),
             *(["    docs = docs_for(i)"] if spec.endpoint == "rerank" else []),
             "    start = time.perf_counter()",
             *request_call(spec, "PROMPTS[i]", "    ", c, awaited=True, tokens="LENGTHS[i]"),
             f"    return time.perf_counter() - start, {tokens_used(spec)}"]
    one = (["async def one(i):", *wait, *inner] if not gate or load.shape == "poisson" else
           ["async def one(i):", "    async with IN_FLIGHT:", *["    " + line for line in inner]])
    return [*shape_lines(spec, c), *note, *gate, "", *one, "",
            "async def main():",
            "    start = time.perf_counter()",
            "    results = await asyncio.gather(*[one(i) for i in range(len(PROMPTS))])",
            "    wall, tokens = time.perf_counter() - start, sum(t for _, t in results)",
            '    print(f"{len(PROMPTS)} requests in {wall:.1f} s, mean latency '
            '{sum(s for s, _ in results) / len(PROMPTS):.1f} s")',
            '    print(f"Throughput: {tokens / wall:.0f} tokens/s ({tokens} tokens)")',
            "",
            "asyncio.run(main())" + c.inline(say("in a notebook: await main()"))]


def _chat_code(run: Any, spec: LoadSpec, w: dict, head: list[str], c: Comments) -> str | None:
    """N conversations × K turns, each turn sent with the history so far (its replies included); with LoRA modules
    each conversation names its own (spec.model_for's conversation index) in every turn."""
    load, turns = run.load, _turns_expr(str(w.get("layout", "")))
    if turns is None or not w.get("conversations") or not w.get("turns") or spec.endpoint != "chat":
        return None
    n = min(load.concurrency or 1, w["conversations"]) if load.shape == "concurrency" else (
        1 if load.shape == "sequential" else w["conversations"])
    think = float(w.get("think_time_s") or 0)
    packed, line = [], "FOLLOW_UPS = ["
    for i, f in enumerate(FOLLOW_UPS):  # what a user says when the file's conversation has no more turns
        piece = lit(f) + ("]" if i == len(FOLLOW_UPS) - 1 else ",")
        if len(line) + 1 + len(piece) > WIDTH:
            packed.append(line)
            line = " " * len("FOLLOW_UPS = [") + piece
        else:
            line += ("" if line.endswith("[") else " ") + piece
    body = [*_file_lines(w, c), *_human(str(w.get("layout", ""))), f"STARTS = [{turns}",
            "          for row in rows]", *packed, line,
            f"CONVERSATIONS, TURNS, rng = {w['conversations']}, {w['turns']}, random.Random({w.get('seed', 0)})",
            "CHATS = [STARTS[i % len(STARTS)][:TURNS] for i in range(CONVERSATIONS)]",
            "CHATS = [chat + [rng.choice(FOLLOW_UPS) for _ in range(TURNS - len(chat))] for chat in CHATS]",
            *shape_lines(spec, c),
            f"IN_FLIGHT = asyncio.Semaphore({n})" + c.inline(say("conversations at once")), "",
            "async def conversation(k, chat):",
            "    messages, took = [], []",
            *(["    model = model_for(k)" + c.inline(say("every turn of a conversation names its LoRA module"))]
              if spec.lora_modules else []),
            "    async with IN_FLIGHT:",
            "        for text in chat:",
            '            messages.append({"role": "user", "content": text})'
            + c.inline(say("the whole history so far, then this turn")),
            "            start = time.perf_counter()",
            *request_call(spec, "", "            ", c, awaited=True, messages="messages"),
            "            took.append(time.perf_counter() - start)",
            '            messages.append({"role": "assistant", "content": r.choices[0].message.content})',
            *([f"            await asyncio.sleep({think:g})" + c.inline(say("the think time before the next turn"))]
              if think else []),
            "    return took", "",
            "async def main():",
            "    results = await asyncio.gather(*[conversation(k, chat) for k, chat in enumerate(CHATS)])",
            "    for t in range(TURNS):",
            '        print(f"Turn {t + 1}: mean latency {sum(r[t] for r in results) / len(results):.2f} s")', "",
            "asyncio.run(main())" + c.inline(say("in a notebook: await main()"))]
    return "\n".join(head + body) + "\n"
