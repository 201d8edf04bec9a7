"""Runs in and out of files: the JSON and CSV exports, and a file given to import read into checked runs.
See docs/internals.md#exchange."""
from __future__ import annotations

import csv
import io
import json
from datetime import datetime
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

from engine.messages import say
from engine.results.credentials import scrub_run
from engine.results.records import RunResult
from engine.results.validation import ImportFailed, quote
from engine.results.vllm_bench import from_bench_json, to_bench_json

# The largest file an import reads (the repository's 9-level H200 sweep is 11 MB).
MAX_IMPORT_CHARS = 64 * 1024 * 1024
MAX_IMPORT_RUNS = 10_000

CSV_COLUMNS = [
    "run_id", "run_kind", "run_scenario", "run_label", "run_model", "run_started", "run_duration_s",
    "run_concurrency", "index", "warmup", "prompt", "send_time_s", "first_token_time_s", "end_time_s",
    "ttft_s", "e2e_s", "prompt_tokens", "output_tokens", "tokens_source", "n_chunks", "error",
    "output_text", "chunk_times_s",
]


# One row per run: vllm bench serve's keys (as the JSON export writes them) where it has one, then what only
# this app records about the run (cold or warm, where it ran, the machine, the server's command line).
RUN_CSV_COLUMNS = [
    "run_id", "date", "label", "scenario", "backend", "model_id", "num_prompts", "request_rate", "max_concurrency",
    "duration", "completed", "failed", "total_input_tokens", "total_output_tokens", "request_throughput",
    "output_throughput", "total_token_throughput", "max_concurrent_requests", "peak_in_flight",
    *(f"{stat}_{name}_ms" for name in ("ttft", "tpot", "itl", "e2el") for stat in ("mean", "median", "p99")),
    "warmth", "server", "hardware", "command",
]


# -- out --------------------------------------------------------------------------------------------

def export_json(runs: Iterable[RunResult], indent: int | None = 1) -> str:
    """A JSON array, one object per run (vllm-bench-serve keys + "serving_lab"), without credentials."""
    return json.dumps([to_bench_json(r) for r in runs], ensure_ascii=False, indent=indent, default=str)


def _num(x: float | None) -> str:
    return "" if x is None else repr(float(x))


def _csv(columns: Sequence[str], rows: Iterable[list]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(columns)
    w.writerows(rows)
    return buf.getvalue()


def _request_rows(runs: Iterable[RunResult]) -> Iterator[list]:
    for run in runs:
        run = scrub_run(run)
        started = datetime.fromtimestamp(run.started_at).isoformat(timespec="seconds")
        for r in run.records:
            yield [run.id, run.kind, run.scenario, run.label, run.model, started,
                   _num(run.duration), run.load.concurrency,
                   r.index, int(r.warmup), r.prompt, _num(r.send_time), _num(r.first_token_time),
                   _num(r.end_time), _num(r.ttft), _num(r.e2e), r.prompt_tokens, r.output_tokens,
                   r.tokens_source, len(r.chunk_times), r.error or "", r.output_text,
                   json.dumps(r.chunk_times)]


def export_csv(runs: Iterable[RunResult]) -> str:
    """CSV, one row per request, each carrying its run's columns, without credentials."""
    return _csv(CSV_COLUMNS, _request_rows(runs))


def run_row(run: RunResult) -> dict[str, Any]:
    """One run's summary under RUN_CSV_COLUMNS (None where it has no value), without credentials: the
    per-run CSV's row and what History's compare table shows."""
    bench = to_bench_json(run)
    run = scrub_run(run)
    cold = run.extra.warmth.cold
    ours = {"run_id": run.id, "scenario": run.scenario,
            "warmth": "" if cold is None else "cold" if cold else "warm",
            "server": run.extra.server.endpoint or ("imported" if run.extra.imported_from else "this app's server"),
            "hardware": str(run.hardware.get("summary") or ""), "command": run.command}
    return {k: ours[k] if k in ours else bench.get(k) for k in RUN_CSV_COLUMNS}


def export_runs_csv(runs: Iterable[RunResult]) -> str:
    """CSV, one row per run (run_row), without credentials."""
    cell = lambda v: "" if v is None else _num(v) if isinstance(v, float) else v  # noqa: E731
    return _csv(RUN_CSV_COLUMNS, ([cell(row[k]) for k in RUN_CSV_COLUMNS] for row in map(run_row, runs)))


# -- in ---------------------------------------------------------------------------------------------

def _too_big(what: str, size: int) -> ImportFailed:
    return ImportFailed(say("{what} is {mb:.0f} MB; an import reads up to {limit} MB: export fewer runs at a time.",
                            what=what, mb=size / 2**20, limit=MAX_IMPORT_CHARS // 2**20))


def read_import_file(path: str | Path) -> str:
    """The text of a file on this machine given to import; ImportFailed (a sentence) when it cannot be one."""
    p = Path(path)
    try:
        if not p.exists():
            raise FileNotFoundError(p)
        if not p.is_file():
            raise ImportFailed(say("{path} is not a file: give the JSON file Serving Lab or vllm bench serve wrote.",
                                   path=str(p)))
        if p.stat().st_size > MAX_IMPORT_CHARS:
            raise _too_big(p.name, p.stat().st_size)
        return p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ImportFailed(say("There is no file {path}: check the path.", path=str(p))) from None
    except UnicodeDecodeError:
        raise ImportFailed(say("{name} is not UTF-8 text: give the JSON file Serving Lab or vllm bench serve "
                               "wrote.", name=p.name)) from None
    except OSError as e:
        raise ImportFailed(say("{path} cannot be read ({why}).", path=str(p), why=e.strerror)) from None


def runs_from_text(text: str) -> list[RunResult]:
    """Every run of an export (or a `vllm bench serve` result file) given as its text, each checked;
    ImportFailed, one sentence naming the first problem and the run it is in, otherwise."""
    if len(text) > MAX_IMPORT_CHARS:
        raise _too_big(say("The file"), len(text))
    objs = _json_objects(text)
    if len(objs) > MAX_IMPORT_RUNS:
        raise ImportFailed(say("The file holds {n:,} runs; an import takes up to {limit:,}: export fewer runs at a "
                               "time.", n=len(objs), limit=MAX_IMPORT_RUNS))
    runs = []
    for i, obj in enumerate(objs):
        try:
            runs.append(from_bench_json(obj))
        except ImportFailed as e:
            where = say("Run {i} of {n}", i=i + 1, n=len(objs)) if len(objs) > 1 else say("The run")
            why = e.args[0] if len(e.args) == 1 and e.args[0] == str(e) else str(e)  # the Message it was raised with
            raise ImportFailed(say("{where}{label}: {why}", where=where, label=_label_note(obj), why=why)) from None
    return runs


def _json_objects(text: str) -> list[dict[str, Any]]:
    """Objects from a JSON array, one object, or several objects one after another (vllm's
    --append-result writes those)."""
    dec = json.JSONDecoder()
    out: list[Any] = []
    i, n = 0, len(text)
    try:
        while True:
            while i < n and text[i].isspace():
                i += 1
            if i >= n:
                break
            obj, i = dec.raw_decode(text, i)
            if isinstance(obj, list):
                out += obj
            else:
                out.append(obj)
    except json.JSONDecodeError as e:
        raise ImportFailed(say("The file is not valid JSON ({why} at line {line}, column {column}): export it "
                               "again from Serving Lab or vllm bench serve.", why=e.msg, line=e.lineno,
                               column=e.colno)) from None
    except RecursionError:
        raise ImportFailed(say("The file is nested deeper than any export is: it is not a file Serving Lab or vllm "
                               "bench serve wrote.")) from None
    if not out:
        raise ImportFailed(say("The file holds no runs: export them again from Serving Lab or vllm bench serve."))
    for k, o in enumerate(out):
        if not isinstance(o, dict):
            raise ImportFailed(say("Item {k} of {n} in the file is not a run (a JSON object): export it "
                                   "again from Serving Lab or vllm bench serve.", k=k + 1, n=len(out)))
    return out


def _label_note(obj: dict) -> str:
    """' ('label')' for a sentence about a run of a file, when it has a label."""
    lab = obj.get("serving_lab")
    label = lab.get("label") if isinstance(lab, dict) else obj.get("label")
    return f" ({quote(label)})" if isinstance(label, str) and quote(label) != "''" else ""
