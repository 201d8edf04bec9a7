"""Run history: every completed run, kept in SQLite, exported and imported as JSON or CSV.

One file, `data_home()/history.sqlite` (a path can be given instead, e.g. in tests). It is written
crash-safe: WAL journal, `synchronous=FULL`, one transaction per save, committed before `save()`
returns, so killing the app right after a save loses nothing. Every call opens its own connection
and writes are serialized by a lock, so the Streamlit app may call one `RunStore` from many threads;
a second process sees a save the moment it returns.

The JSON export is one object per run, with the keys of `vllm bench serve`'s result file where the
concept is the same (`date`, `backend`, `model_id`, `completed`, `mean_ttft_ms`, `ttfts`, `itls`, ...),
plus `"serving_lab"`: the full `RunResult`, so an import gives back exactly what was saved. A plain
`vllm bench serve --save-result --save-detailed` file imports too (records rebuilt from its lists).
"""
from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Iterable

from .errors import LabError
from .records import RequestRecord, RunResult

SCHEMA_VERSION = 1
EXPORT_FORMAT = "serving-lab-run/1"
# Where the repository ships example runs (e.g. made headless on an H200).
EXAMPLES_DIR = Path(__file__).resolve().parent.parent / "examples"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id          TEXT PRIMARY KEY,
    kind        TEXT NOT NULL,
    scenario    TEXT NOT NULL,
    label       TEXT NOT NULL,
    started_at  REAL NOT NULL,
    duration    REAL NOT NULL,
    model       TEXT NOT NULL DEFAULT '',
    config      TEXT NOT NULL DEFAULT '{}',
    command     TEXT NOT NULL DEFAULT '',
    load        TEXT NOT NULL DEFAULT '{}',
    hardware    TEXT NOT NULL DEFAULT '{}',
    versions    TEXT NOT NULL DEFAULT '{}',
    summary     TEXT NOT NULL DEFAULT '{}',
    extra       TEXT NOT NULL DEFAULT '{}',
    n_requests  INTEGER NOT NULL DEFAULT 0,
    n_failed    INTEGER NOT NULL DEFAULT 0,
    source      TEXT NOT NULL DEFAULT 'local',
    saved_at    REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS runs_started ON runs(started_at);
CREATE TABLE IF NOT EXISTS requests (
    run_id            TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    seq               INTEGER NOT NULL,
    request_index     INTEGER NOT NULL,
    prompt            TEXT NOT NULL,
    send_time         REAL NOT NULL,
    end_time          REAL,
    first_token_time  REAL,
    chunk_times       TEXT NOT NULL DEFAULT '[]',
    prompt_tokens     INTEGER NOT NULL DEFAULT 0,
    output_tokens     INTEGER NOT NULL DEFAULT 0,
    tokens_source     TEXT NOT NULL DEFAULT 'usage',
    output_text       TEXT NOT NULL DEFAULT '',
    error             TEXT,
    warmup            INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (run_id, seq)
);
"""

_BACKENDS = {"vllm": "openai-chat", "naive": "transformers", "static-batch": "transformers-static-batch"}

_locks: dict[str, threading.RLock] = {}
_locks_guard = threading.Lock()


def _lock_for(path: Path) -> threading.RLock:
    key = str(path.resolve())
    with _locks_guard:
        return _locks.setdefault(key, threading.RLock())


class RunNotFound(LabError, KeyError):
    """No run with that id in the history."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else "run not found"


class ImportFailed(LabError):
    """A file given to import is not a Serving Lab export nor a `vllm bench serve` result."""


@dataclass
class RunRow:
    """One line of the history list: everything but the per-request records (cheap to list)."""

    id: str
    kind: str
    scenario: str
    label: str
    started_at: float
    duration: float
    model: str
    n_requests: int
    n_failed: int
    source: str  # "local" | "import:<file name>" | "example:<file name>"
    saved_at: float
    summary: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    load: dict[str, Any] = field(default_factory=dict)
    hardware: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    command: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @property
    def started(self) -> str:
        """Local wall-clock start, e.g. '2025-11-30 11:18:04'."""
        return datetime.fromtimestamp(self.started_at).strftime("%Y-%m-%d %H:%M:%S")


def _dumps(obj: Any) -> str:
    # allow_nan: Python's json (and vllm's result files) keep inf/NaN; a summary may hold them.
    return json.dumps(obj, ensure_ascii=False, default=str)


def _loads(text: str | None, default: Any) -> Any:
    if not text:
        return default
    return json.loads(text)


class RunStore:
    """The run history. `RunStore()` uses `paths.history_path()` ($SERVING_LAB_DB, else
    `data_home()/history.sqlite`); pass `path` to use another."""

    def __init__(self, path: str | Path | None = None):
        if path is None:
            from .paths import history_path

            path = history_path()
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = _lock_for(self.path)
        with self._lock, self._connect() as conn:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.executescript(_SCHEMA)
            conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    # -- plumbing ---------------------------------------------------------------------------------

    def _connect(self) -> "_Conn":
        return _Conn(self.path)

    # -- writing ----------------------------------------------------------------------------------

    def save(self, run: RunResult, source: str = "local") -> str:
        """Store `run` (replacing a run with the same id) in one committed transaction; returns its id."""
        rows = [
            (
                run.id, seq, r.index, r.prompt, r.send_time, r.end_time, r.first_token_time,
                _dumps(list(r.chunk_times)), r.prompt_tokens, r.output_tokens, r.tokens_source,
                r.output_text, r.error, int(bool(r.warmup)),
            )
            for seq, r in enumerate(run.records)
        ]
        measured = run.measured
        n_failed = sum(1 for r in measured if r.error is not None)
        with self._lock, self._connect() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.execute("DELETE FROM requests WHERE run_id=?", (run.id,))
                conn.execute(
                    "INSERT OR REPLACE INTO runs (id, kind, scenario, label, started_at, duration, model,"
                    " config, command, load, hardware, versions, summary, extra, n_requests, n_failed,"
                    " source, saved_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    (
                        run.id, run.kind, run.scenario, run.label, float(run.started_at),
                        float(run.duration), run.model, _dumps(run.config), run.command,
                        _dumps(run.load), _dumps(run.hardware), _dumps(run.versions),
                        _dumps(run.summary), _dumps(run.extra), len(measured), n_failed, source,
                        time.time(),
                    ),
                )
                conn.executemany(
                    "INSERT INTO requests (run_id, seq, request_index, prompt, send_time, end_time,"
                    " first_token_time, chunk_times, prompt_tokens, output_tokens, tokens_source,"
                    " output_text, error, warmup) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    rows,
                )
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        return run.id

    def delete(self, ids: str | Iterable[str]) -> int:
        """Delete runs (and their requests); returns how many runs were removed."""
        ids = [ids] if isinstance(ids, str) else list(ids)
        if not ids:
            return 0
        marks = ",".join("?" * len(ids))
        with self._lock, self._connect() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.execute(f"DELETE FROM requests WHERE run_id IN ({marks})", ids)
                n = conn.execute(f"DELETE FROM runs WHERE id IN ({marks})", ids).rowcount
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        return n

    def rename(self, run_id: str, label: str) -> None:
        """Change a run's legend label."""
        with self._lock, self._connect() as conn:
            conn.execute("BEGIN IMMEDIATE")
            n = conn.execute("UPDATE runs SET label=? WHERE id=?", (label, run_id)).rowcount
            conn.execute("COMMIT")
        if not n:
            raise RunNotFound(f"No run {run_id!r} in the history; it may have been deleted.")

    # -- reading ----------------------------------------------------------------------------------

    def list(self, limit: int | None = None, kind: str | None = None) -> list[RunRow]:
        """Saved runs, newest first, without their request rows."""
        sql = ("SELECT id, kind, scenario, label, started_at, duration, model, n_requests, n_failed,"
               " source, saved_at, summary, config, load, hardware, versions, extra, command FROM runs")
        args: list[Any] = []
        if kind:
            sql += " WHERE kind=?"
            args.append(kind)
        sql += " ORDER BY started_at DESC, saved_at DESC"
        if limit is not None:
            sql += " LIMIT ?"
            args.append(int(limit))
        with self._connect() as conn:
            rows = conn.execute(sql, args).fetchall()
        return [
            RunRow(
                id=r[0], kind=r[1], scenario=r[2], label=r[3], started_at=r[4], duration=r[5],
                model=r[6], n_requests=r[7], n_failed=r[8], source=r[9], saved_at=r[10],
                summary=_loads(r[11], {}), config=_loads(r[12], {}), load=_loads(r[13], {}),
                hardware=_loads(r[14], {}), versions=_loads(r[15], {}), extra=_loads(r[16], {}),
                command=r[17],
            )
            for r in rows
        ]

    def __contains__(self, run_id: str) -> bool:
        with self._connect() as conn:
            return conn.execute("SELECT 1 FROM runs WHERE id=?", (run_id,)).fetchone() is not None

    def __len__(self) -> int:
        with self._connect() as conn:
            return conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0]

    def load(self, run_id: str) -> RunResult:
        """The full run with its records, exactly as saved."""
        with self._connect() as conn:
            row = conn.execute(
                "SELECT id, kind, scenario, label, started_at, duration, model, config, command, load,"
                " hardware, versions, summary, extra FROM runs WHERE id=?",
                (run_id,),
            ).fetchone()
            if row is None:
                raise RunNotFound(f"No run {run_id!r} in the history; it may have been deleted.")
            reqs = conn.execute(
                "SELECT request_index, prompt, send_time, end_time, first_token_time, chunk_times,"
                " prompt_tokens, output_tokens, tokens_source, output_text, error, warmup"
                " FROM requests WHERE run_id=? ORDER BY seq",
                (run_id,),
            ).fetchall()
        records = [
            RequestRecord(
                index=q[0], prompt=q[1], send_time=q[2], end_time=q[3], first_token_time=q[4],
                chunk_times=_loads(q[5], []), prompt_tokens=q[6], output_tokens=q[7],
                tokens_source=q[8], output_text=q[9], error=q[10], warmup=bool(q[11]),
            )
            for q in reqs
        ]
        return RunResult(
            id=row[0], kind=row[1], scenario=row[2], label=row[3], started_at=row[4],
            duration=row[5], model=row[6], config=_loads(row[7], {}), command=row[8],
            load=_loads(row[9], {}), hardware=_loads(row[10], {}), versions=_loads(row[11], {}),
            summary=_loads(row[12], {}), extra=_loads(row[13], {}), records=records,
        )

    def load_many(self, ids: Iterable[str]) -> list[RunResult]:
        return [self.load(i) for i in ids]

    # -- export -----------------------------------------------------------------------------------

    def export_json(self, ids: str | Iterable[str] | None = None, indent: int | None = 1) -> str:
        """A JSON array, one object per run (vllm-bench-serve keys + "serving_lab"); None = all runs."""
        return json.dumps([to_bench_json(r) for r in self._runs(ids)], ensure_ascii=False, indent=indent,
                          default=str)

    def export_csv(self, ids: str | Iterable[str] | None = None) -> str:
        """CSV, one row per request, each carrying its run's columns; None = all runs."""
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(CSV_COLUMNS)
        for run in self._runs(ids):
            started = datetime.fromtimestamp(run.started_at).isoformat(timespec="seconds")
            for r in run.records:
                w.writerow([
                    run.id, run.kind, run.scenario, run.label, run.model, started,
                    _num(run.duration), run.load.get("concurrency", run.load.get("max_concurrency", "")),
                    r.index, int(r.warmup), r.prompt, _num(r.send_time), _num(r.first_token_time),
                    _num(r.end_time), _num(r.ttft), _num(r.e2e), r.prompt_tokens, r.output_tokens,
                    r.tokens_source, len(r.chunk_times), r.error or "", r.output_text,
                    json.dumps(r.chunk_times),
                ])
        return buf.getvalue()

    def _runs(self, ids: str | Iterable[str] | None) -> list[RunResult]:
        if ids is None:
            ids = [r.id for r in self.list()]
        elif isinstance(ids, str):
            ids = [ids]
        return [self.load(i) for i in ids]

    # -- import -----------------------------------------------------------------------------------

    def import_json(self, text_or_path: str | Path, source: str | None = None,
                    replace: bool = False) -> list[str]:
        """Import runs from an export (or a `vllm bench serve` result file); returns their ids.

        A run already in the history (same id) is left alone, so importing one file twice adds
        nothing; pass replace=True to overwrite it instead."""
        text, name = _read_text(text_or_path)
        src = source or (f"import:{name}" if name else "import")
        ids = []
        for obj in _json_objects(text):
            run = from_bench_json(obj)
            if replace or run.id not in self:
                self.save(run, source=src)
            ids.append(run.id)
        return ids

    def import_examples(self, folder: str | Path | None = None) -> list[str]:
        """Import every *.json in `folder` (default: the repository's examples/); returns the ids of the
        runs that were new (ones already present are skipped)."""
        folder = Path(folder) if folder is not None else EXAMPLES_DIR
        if not folder.is_dir():
            return []
        before = {r.id for r in self.list()}
        ids: list[str] = []
        for f in sorted(folder.glob("*.json")):
            ids += self.import_json(f, source=f"example:{f.name}")
        return [i for i in ids if i not in before]


class _Conn:
    """A short-lived connection: autocommit mode (we BEGIN/COMMIT ourselves), closed on exit."""

    def __init__(self, path: Path):
        self.conn = sqlite3.connect(str(path), timeout=30.0, isolation_level=None,
                                    check_same_thread=False)
        self.conn.execute("PRAGMA synchronous=FULL")
        self.conn.execute("PRAGMA foreign_keys=ON")
        self.conn.execute("PRAGMA busy_timeout=30000")

    def __enter__(self) -> sqlite3.Connection:
        return self.conn

    def __exit__(self, *exc) -> None:
        self.conn.close()


CSV_COLUMNS = [
    "run_id", "run_kind", "run_scenario", "run_label", "run_model", "run_started", "run_duration_s",
    "run_concurrency", "index", "warmup", "prompt", "send_time_s", "first_token_time_s", "end_time_s",
    "ttft_s", "e2e_s", "prompt_tokens", "output_tokens", "tokens_source", "n_chunks", "error",
    "output_text", "chunk_times_s",
]


def _num(x: float | None) -> str:
    return "" if x is None else repr(float(x))


def _read_text(text_or_path: str | Path) -> tuple[str, str]:
    if isinstance(text_or_path, Path):
        return text_or_path.read_text(encoding="utf-8"), text_or_path.name
    s = str(text_or_path)
    if s.lstrip()[:1] in ("{", "["):
        return s, ""
    p = Path(s)
    if p.is_file():
        return p.read_text(encoding="utf-8"), p.name
    raise ImportFailed(f"Nothing to import: {s[:80]!r} is neither JSON text nor an existing file.")


def _json_objects(text: str) -> list[dict[str, Any]]:
    """Objects from a JSON array, one object, or several objects one after another (vllm's
    --append-result writes those)."""
    dec = json.JSONDecoder()
    out: list[dict[str, Any]] = []
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
        raise ImportFailed(f"The file is not valid JSON ({e}); export it again from Serving Lab "
                           "or vllm bench serve.") from None
    if not all(isinstance(o, dict) for o in out):
        raise ImportFailed("The JSON holds something other than run objects; nothing was imported.")
    return out


# -- the vllm-bench-serve shaped JSON -------------------------------------------------------------

def _summary_for(run: RunResult) -> dict[str, Any]:
    if run.summary:
        return dict(run.summary)
    try:  # stats.py computes the vllm-named metrics; fall back to the basics without it
        from .stats import summarize

        return summarize(run.measured, run.duration)
    except Exception:
        m = run.measured
        ok = [r for r in m if r.ok]
        out_tok = sum(r.output_tokens for r in ok)
        in_tok = sum(r.prompt_tokens for r in ok)
        d = run.duration or float("nan")
        return {
            "duration": run.duration, "completed": len(ok), "failed": len(m) - len(ok),
            "total_input_tokens": in_tok, "total_output_tokens": out_tok,
            "request_throughput": len(ok) / d, "output_throughput": out_tok / d,
            "total_token_throughput": (in_tok + out_tok) / d,
        }


def to_bench_json(run: RunResult) -> dict[str, Any]:
    """One run as a `vllm bench serve` result object (+ "serving_lab": the whole RunResult)."""
    m = run.measured
    load = run.load
    rate = load.get("request_rate", float("inf"))
    conc = load.get("concurrency", load.get("max_concurrency"))
    obj: dict[str, Any] = {
        "date": datetime.fromtimestamp(run.started_at).strftime("%Y%m%d-%H%M%S"),
        "endpoint_type": load.get("backend") or _BACKENDS.get(run.kind, run.kind),
        "backend": load.get("backend") or _BACKENDS.get(run.kind, run.kind),
        "label": run.label,
        "model_id": run.model,
        "tokenizer_id": run.config.get("tokenizer") or run.model,
        "num_prompts": len(m),
        "request_rate": "inf" if isinstance(rate, (int, float)) and math.isinf(rate) else rate,
        "burstiness": load.get("burstiness", 1.0),
        "max_concurrency": conc,
    }
    summ = _summary_for(run)
    # Our summary's max_concurrency is the observed peak; vllm's is the configured limit and it
    # calls the observed peak max_concurrent_requests.
    observed = summ.pop("max_concurrency", None)
    obj.update(summ)
    obj["max_concurrency"] = conc
    obj["max_concurrent_requests"] = observed
    obj["duration"] = run.duration
    # Per-request lists, with vllm's conventions: seconds, 0.0 / [] / "" where there is nothing.
    obj["input_lens"] = [r.prompt_tokens for r in m]
    obj["output_lens"] = [r.output_tokens for r in m]
    obj["ttfts"] = [r.ttft if r.ttft is not None else 0.0 for r in m]
    obj["itls"] = [[b - a for a, b in zip(r.chunk_times, r.chunk_times[1:])] for r in m]
    obj["latencies"] = [r.e2e if r.e2e is not None else 0.0 for r in m]
    obj["start_times"] = [r.send_time for r in m]
    obj["generated_texts"] = [r.output_text for r in m]
    obj["errors"] = [r.error or "" for r in m]
    obj["serving_lab"] = {"format": EXPORT_FORMAT, **run.to_dict()}
    return obj


def from_bench_json(obj: dict[str, Any]) -> RunResult:
    """The RunResult inside an export; for a plain `vllm bench serve` file, one rebuilt from it."""
    lab = obj.get("serving_lab")
    if isinstance(lab, dict) and "records" in lab:
        d = {k: v for k, v in lab.items() if k != "format"}
        return RunResult.from_dict(d)
    if "model_id" not in obj and "completed" not in obj:
        raise ImportFailed("This JSON is neither a Serving Lab export nor a vllm bench serve result "
                           "(no 'serving_lab', 'model_id' or 'completed' key).")
    return _from_vllm_result(obj)


def _from_vllm_result(obj: dict[str, Any]) -> RunResult:
    n = len(obj.get("ttfts") or obj.get("latencies") or [])
    starts = obj.get("start_times") or []
    t0 = min(starts) if starts else 0.0
    records = []
    for i in range(n):
        def at(key, default=None):
            v = obj.get(key) or []
            return v[i] if i < len(v) else default

        send = (at("start_times", t0) or 0.0) - t0
        err = at("errors", "") or None
        lat = at("latencies", 0.0) or 0.0
        ttft = at("ttfts", 0.0) or 0.0
        itl = at("itls", []) or []
        chunks: list[float] = []
        if ttft:
            t = send + ttft
            chunks.append(t)
            for gap in itl:
                t += gap
                chunks.append(t)
        records.append(RequestRecord(
            index=i, prompt="", send_time=send,
            end_time=None if (err and not lat) else send + lat,
            first_token_time=send + ttft if ttft else None, chunk_times=chunks,
            prompt_tokens=int(at("input_lens", 0) or 0), output_tokens=int(at("output_lens", 0) or 0),
            output_text=at("generated_texts", "") or "", error=err,
        ))
    skip = {"input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times", "queue_times",
            "generated_texts", "errors", "num_prompts", "request_rate", "burstiness",
            "ramp_up_start_rps", "ramp_up_end_rps"}
    summary = {k: v for k, v in obj.items() if k not in skip and isinstance(v, (int, float, type(None)))}
    summary.pop("max_concurrency", None)  # vllm's is the configured limit: kept in load below
    if obj.get("max_concurrent_requests") is not None:
        summary["max_concurrency"] = obj["max_concurrent_requests"]
    date = obj.get("date", "")
    try:
        started = datetime.strptime(date, "%Y%m%d-%H%M%S").timestamp()
    except (TypeError, ValueError):
        started = 0.0
    rate = obj.get("request_rate", "inf")
    digest = hashlib.sha1(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:12]
    return RunResult(
        id=f"vb{digest[:10]}",
        kind="vllm",
        scenario="vllm-bench-serve",
        label=obj.get("label") or f"vllm bench serve {date}".strip(),
        records=records,
        duration=float(obj.get("duration") or 0.0),
        started_at=started,
        model=obj.get("model_id") or "",
        config={"tokenizer": obj.get("tokenizer_id")} if obj.get("tokenizer_id") else {},
        load={"backend": obj.get("backend"), "request_rate": float(rate) if rate != "inf" else float("inf"),
              "burstiness": obj.get("burstiness"), "max_concurrency": obj.get("max_concurrency"),
              "num_prompts": obj.get("num_prompts")},
        summary=summary,
        extra={"imported_from": "vllm bench serve"},
    )
