"""Run history: every completed run, kept in SQLite, exported and imported as JSON or CSV.

One file, `data_home()/history.sqlite` (a path can be given instead, e.g. in tests), readable by its
owner only (0600, set when the file is created). It is written crash-safe: WAL journal,
`synchronous=FULL`, one transaction per save, committed before `save()` returns, so killing the app
right after a save loses nothing. Every call opens its own connection and writes are serialized by a
lock, so the Streamlit app may call one `RunStore` from many threads; a second process sees a save
the moment it returns.

Secrets never reach the file: `save()` drops API keys, tokens and passwords from a run (any key named
like one, at any depth, and `--api-key X` in command lines), exports do the same, and opening a
history written before schema version 2 cleans the rows already there.

The JSON export is one object per run, with the keys of `vllm bench serve`'s result file where the
concept is the same (`date`, `backend`, `model_id`, `completed`, `mean_ttft_ms`, `ttfts`, `itls`, ...),
plus `"serving_lab"`: the full `RunResult`, so an import gives back exactly what was saved. A plain
`vllm bench serve --save-result --save-detailed` file imports too (records rebuilt from its lists).
Imports come from other machines and other people: every field is checked (types, finite numbers,
sane times, sizes) before anything is written, a file goes in as one transaction or not at all, and a
bad file is refused with one sentence naming its first problem.
"""
from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import os
import re
import sqlite3
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Iterable

from engine.errors import LabError
from engine.results.records import RequestRecord, RunResult

SCHEMA_VERSION = 2  # 1: the tables; 2: no secrets in stored runs
EXPORT_FORMAT = "serving-lab-run/1"
# Where the repository ships example runs (e.g. made headless on an H200).
EXAMPLES_DIR = Path(__file__).resolve().parent.parent / "examples"
# The largest file an import reads (the repository's 9-level H200 sweep is 11 MB).
MAX_IMPORT_CHARS = 64 * 1024 * 1024

_SCHEMA = [
    """CREATE TABLE IF NOT EXISTS runs (
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
)""",
    "CREATE INDEX IF NOT EXISTS runs_started ON runs(started_at)",
    """CREATE TABLE IF NOT EXISTS requests (
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
)""",
]

_BACKENDS = {"vllm": "openai-chat", "naive": "transformers", "static-batch": "transformers-static-batch"}

# Per database file, shared by every RunStore of this process: the write lock, and a counter of
# committed writes that makes the change token move at once for this process's own writes.
_locks: dict[str, threading.RLock] = {}
_writes: dict[str, int] = {}
_locks_guard = threading.Lock()


def _lock_for(path: Path) -> threading.RLock:
    key = str(path.resolve())
    with _locks_guard:
        _writes.setdefault(key, 0)
        return _locks.setdefault(key, threading.RLock())


class RunNotFound(LabError, KeyError):
    """No run with that id in the history."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else "run not found"


class RunDamaged(LabError):
    """A stored run cannot be read back (an older database, a hand edit); it can still be deleted."""


class ImportFailed(LabError):
    """A file given to import is not a Serving Lab export nor a `vllm bench serve` result, or breaks
    one of its rules; nothing of it was imported."""


# -- secrets ----------------------------------------------------------------------------------------

# Keys that hold credentials, whatever the casing or prefix: api_key, Authorization, hf_token, Password.
# Anchored at the end so that max_tokens, kv_cache_tokens and tokenizer are kept.
_SECRET_KEY = re.compile(r"(?:^|[_\-. ])(?:api[_\-]?key|apikey|authorization|auth|token|password|passwd|secret)$",
                         re.I)
# `--api-key X`, `--hf-token=X` in a command line: the value becomes the variable it should come from.
_SECRET_FLAG = re.compile(r"(--(?:[\w-]*-)?(?:api-key|token|password|secret))(=|[ \t]+)('[^']*'|\"[^\"]*\"|[^\s\\]+)",
                          re.I)
# `VLLM_API_KEY=X python -m ...`, `HF_TOKEN=X`
_SECRET_ENV = re.compile(r"\b([A-Z][A-Z0-9_]*(?:API_KEY|TOKEN|PASSWORD|SECRET))=('[^']*'|\"[^\"]*\"|[^\s\\]+)")
_BEARER = re.compile(r"(Bearer\s+)[^\s\"',;]+")


def _variable_for(flag: str) -> str:
    name = flag.lstrip("-").upper().replace("-", "_")
    return "VLLM_API_KEY" if name == "API_KEY" else name


def scrub_text(text: str) -> str:
    """`text` (a command line, an error) with secret values replaced by the variable that holds them."""
    if "-" not in text and "=" not in text and "Bearer" not in text:
        return text  # the common case, at no regex cost
    text = _SECRET_FLAG.sub(
        lambda m: m.group(0) if m.group(3).startswith(("$", "\"$")) else
        f"{m.group(1)}{m.group(2)}${_variable_for(m.group(1))}", text)
    text = _SECRET_ENV.sub(
        lambda m: m.group(0) if m.group(2).lstrip("\"").startswith("$") else f'{m.group(1)}="${m.group(1)}"', text)
    return _BEARER.sub(r"\1***", text)


def _scrub_argv(items: list) -> list:
    """An argv list: the value after a secret flag is replaced too (['--api-key', 'X'])."""
    out = [scrub(v) for v in items]
    for i, v in enumerate(out[:-1]):
        if isinstance(v, str) and isinstance(out[i + 1], str) and _SECRET_FLAG.fullmatch(f"{v} x") \
                and not out[i + 1].startswith("$"):
            out[i + 1] = f"${_variable_for(v)}"
    return out


def scrub(obj: Any) -> Any:
    """A copy of `obj` (JSON-like) without credentials: secret-named keys dropped at any depth,
    secret values in strings and argv lists replaced by their variable's name."""
    if isinstance(obj, dict):
        return {k: scrub(v) for k, v in obj.items() if not _SECRET_KEY.search(str(k))}
    if isinstance(obj, (list, tuple)):
        return _scrub_argv(list(obj))
    if isinstance(obj, str):
        return scrub_text(obj)
    return obj


def scrub_run(run: RunResult) -> RunResult:
    """A copy of `run` with no credential left in its settings, command line or request errors."""
    records = [r if r.error is None or scrub_text(r.error) == r.error else replace(r, error=scrub_text(r.error))
               for r in run.records]
    return replace(run, config=scrub(run.config), load=scrub(run.load), extra=scrub(run.extra),
                   hardware=scrub(run.hardware), command=scrub_text(run.command), records=records)


# -- the file itself --------------------------------------------------------------------------------

def _private_file(path: Path) -> None:
    """Create the database file readable by its owner only, before sqlite opens it (sqlite gives the
    -wal and -shm files the database's mode); tighten a file an older version left world-readable."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as e:
        raise LabError(f"The run history {path} cannot be opened ({e.strerror}): set SERVING_LAB_DB to a file "
                       "you can write.") from None
    try:
        if os.fstat(fd).st_mode & 0o077:
            os.fchmod(fd, 0o600)
    finally:
        os.close(fd)
    for side in ("-wal", "-shm"):
        try:
            if os.stat(f"{path}{side}").st_mode & 0o077:
                os.chmod(f"{path}{side}", 0o600)
        except FileNotFoundError:
            pass


def _stamp(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    # An empty -wal comes and goes with every connection: the same as none.
    return (st.st_mtime_ns, st.st_size, st.st_ino) if st.st_size else None


# -- what the history list holds --------------------------------------------------------------------

_TIME_MIN = datetime(2000, 1, 1).timestamp()


def _sane_time(t: Any) -> bool:
    return isinstance(t, (int, float)) and not isinstance(t, bool) and _TIME_MIN <= t <= time.time() + 86400


@dataclass
class RunRow:
    """One line of the history list: everything but the per-request records (cheap to list). Values
    are always of their type, whatever the row held; `problem` says what was wrong with it."""

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
    problem: str = ""  # e.g. "its start time is not a date": the row is shown, kept and deletable

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @property
    def started(self) -> str:
        """Local wall-clock start, e.g. '2025-11-30 11:18:04'; 'unknown' for a time that is not one."""
        if not _sane_time(self.started_at):
            return "unknown"
        return datetime.fromtimestamp(self.started_at).strftime("%Y-%m-%d %H:%M:%S")

    @property
    def failed(self) -> bool:
        """No measured request succeeded: kept for the record, left out of comparisons."""
        return self.n_failed >= self.n_requests


def _dumps(obj: Any) -> str:
    # allow_nan: Python's json (and vllm's result files) keep inf/NaN (a request rate of inf).
    return json.dumps(obj, ensure_ascii=False, default=str)


def _loads(text: str | None, default: Any) -> Any:
    if not text:
        return default
    return json.loads(text)


def _text_of(v: Any) -> str:
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    return "" if v is None else str(v)


def _row(r: tuple) -> RunRow:
    """A RunRow from whatever the columns hold (SQLite keeps any type in any column)."""
    problems: list[str] = []

    def number(v, what: str, integer: bool = False) -> Any:
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0
        if not ok:
            problems.append(f"its {what} is not a number")
            return 0 if integer else 0.0
        return int(v) if integer else float(v)

    def obj(v, what: str) -> dict:
        try:
            d = _loads(_text_of(v), {})
        except (ValueError, RecursionError):
            d = None
        if not isinstance(d, dict):
            problems.append(f"its {what} is unreadable")
            return {}
        return d

    started = r[4]
    if not _sane_time(started):
        problems.append("its start time is not a date between 2000 and now")
        started = 0.0
    summary = {k: v for k, v in obj(r[11], "summary").items()
               if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}
    return RunRow(
        id=_text_of(r[0]), kind=_text_of(r[1]), scenario=_text_of(r[2]), label=_text_of(r[3]),
        started_at=float(started), duration=number(r[5], "wall time"), model=_text_of(r[6]),
        n_requests=number(r[7], "request count", True), n_failed=number(r[8], "failure count", True),
        source=_text_of(r[9]), saved_at=r[10] if isinstance(r[10], (int, float)) else 0.0, summary=summary,
        config=obj(r[12], "config"), load=obj(r[13], "load"), hardware=obj(r[14], "hardware"),
        versions=obj(r[15], "versions"), extra=obj(r[16], "extra"), command=_text_of(r[17]),
        problem="; ".join(problems),
    )


class RunStore:
    """The run history. `RunStore()` uses `paths.history_path()` ($SERVING_LAB_DB, else
    `data_home()/history.sqlite`); pass `path` to use another."""

    def __init__(self, path: str | Path | None = None):
        if path is None:
            from engine.paths import history_path

            path = history_path()
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = _lock_for(self.path)
        self._key = str(self.path.resolve())
        self._cache: OrderedDict[tuple, Any] = OrderedDict()
        self._cache_token: tuple | None = None
        self._cache_lock = threading.Lock()
        _private_file(self.path)
        with self._lock, self._connect() as conn:
            conn.execute("PRAGMA journal_mode=WAL")
            self._migrate(conn)

    # -- plumbing ---------------------------------------------------------------------------------

    def _connect(self) -> "_Conn":
        return _Conn(self.path)

    def _migrate(self, conn: sqlite3.Connection) -> None:
        """Bring the file to SCHEMA_VERSION (in one transaction, so two processes opening an old file
        at once migrate it once)."""
        if conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION:
            return
        conn.execute("PRAGMA secure_delete=ON")  # pages freed by the clean-up are zeroed, not left behind
        conn.execute("BEGIN IMMEDIATE")
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise LabError(f"The run history {self.path} was written by a newer Serving Lab (schema {version}, "
                               f"this one reads up to {SCHEMA_VERSION}): update this app, or set SERVING_LAB_DB to "
                               "another file.")
            for statement in _SCHEMA:
                conn.execute(statement)
            if version < 2:
                _remove_stored_secrets(conn)
            conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        # The old pages are still in the WAL until a checkpoint copies the clean ones over them.
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        self._wrote()

    def _wrote(self) -> None:
        with _locks_guard:
            _writes[self._key] += 1

    def change_token(self) -> tuple:
        """Changes whenever the history may have: this process's writes (a counter) and other
        processes' (the database and -wal files' size and time). Cheap: two stat calls."""
        with _locks_guard:
            n = _writes[self._key]
        return n, _stamp(str(self.path)), _stamp(f"{self.path}-wal")

    def _cached(self, key: tuple, make: Callable[[], Any], keep: int = 64) -> Any:
        token = self.change_token()
        with self._cache_lock:
            if token != self._cache_token:
                self._cache.clear()
                self._cache_token = token
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
        value = make()  # read after the token: never older than it
        with self._cache_lock:
            if self._cache_token == token:
                self._cache[key] = value
                while len(self._cache) > keep:
                    self._cache.popitem(last=False)
        return value

    # -- writing ----------------------------------------------------------------------------------

    def save(self, run: RunResult, source: str = "local") -> str:
        """Store `run` (replacing a run with the same id) in one committed transaction; returns its id.
        Credentials in it are not stored (see scrub_run)."""
        with self._lock, self._connect() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                _insert(conn, run, source)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        self._wrote()
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
        self._wrote()
        return n

    def rename(self, run_id: str, label: str) -> None:
        """Change a run's legend label."""
        with self._lock, self._connect() as conn:
            conn.execute("BEGIN IMMEDIATE")
            n = conn.execute("UPDATE runs SET label=? WHERE id=?", (label, run_id)).rowcount
            conn.execute("COMMIT")
        self._wrote()
        if not n:
            raise RunNotFound(f"No run {run_id!r} in the history; it may have been deleted.")

    # -- reading ----------------------------------------------------------------------------------

    def list(self, limit: int | None = None, kind: str | None = None) -> list[RunRow]:
        """Saved runs, newest first, without their request rows. A row that is odd (an older
        database, a hand edit) is listed with its `problem`, never raises."""
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
        return [_row(r) for r in rows]

    def list_cached(self, limit: int | None = None, kind: str | None = None) -> list[RunRow]:
        """`list()`, read once per change of the history (see change_token) and shared by every
        caller until then: for pages that redraw every second. Do not modify what it returns."""
        return self._cached(("list", limit, kind), lambda: self.list(limit, kind))

    def __contains__(self, run_id: str) -> bool:
        with self._connect() as conn:
            return conn.execute("SELECT 1 FROM runs WHERE id=?", (run_id,)).fetchone() is not None

    def __len__(self) -> int:
        with self._connect() as conn:
            return conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0]

    def load(self, run_id: str) -> RunResult:
        """The full run with its records, exactly as saved; RunDamaged (a sentence) for a stored run
        that breaks the rules an import is held to."""
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
        try:
            d = {
                "id": row[0], "kind": row[1], "scenario": row[2], "label": row[3], "started_at": row[4],
                "duration": row[5], "model": row[6], "config": _loads(row[7], {}), "command": row[8],
                "load": _loads(row[9], {}), "hardware": _loads(row[10], {}), "versions": _loads(row[11], {}),
                "summary": _loads(row[12], {}), "extra": _loads(row[13], {}),
                "records": [{
                    "index": q[0], "prompt": q[1], "send_time": q[2], "end_time": q[3], "first_token_time": q[4],
                    "chunk_times": _loads(q[5], []), "prompt_tokens": q[6], "output_tokens": q[7],
                    "tokens_source": q[8], "output_text": q[9], "error": q[10], "warmup": bool(q[11]),
                } for q in reqs],
            }
            return _checked_run(d)
        except (_Bad, ValueError, RecursionError) as e:
            why = e.what if isinstance(e, _Bad) else "a stored field is not valid JSON"
            raise RunDamaged(f"The run {_quote(_text_of(row[3]))} in the history is damaged ({why}): delete it, and "
                             "import it again from an export if you have one.") from None

    def load_cached(self, run_id: str) -> RunResult:
        """`load()`, read once per change of the history and shared by every caller until then. Do
        not modify what it returns."""
        return self._cached(("load", run_id), lambda: self.load(run_id), keep=32)

    def load_many(self, ids: Iterable[str]) -> list[RunResult]:
        return [self.load(i) for i in ids]

    # -- export -----------------------------------------------------------------------------------

    def export_json(self, ids: str | Iterable[str] | None = None, indent: int | None = 1) -> str:
        """A JSON array, one object per run (vllm-bench-serve keys + "serving_lab"); None = all runs.
        Damaged runs (see load) and runs deleted meanwhile are left out."""
        return json.dumps([to_bench_json(r) for r in self._runs(ids)], ensure_ascii=False, indent=indent,
                          default=str)

    def export_csv(self, ids: str | Iterable[str] | None = None) -> str:
        """CSV, one row per request, each carrying its run's columns; None = all runs."""
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(CSV_COLUMNS)
        for run in self._runs(ids):
            run = scrub_run(run)
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
        runs = []
        for i in ids:
            try:
                runs.append(self.load(i))
            except (RunDamaged, RunNotFound):
                pass  # the page says which runs are damaged; a run deleted since the click is gone
        return runs

    # -- import -----------------------------------------------------------------------------------

    def import_text(self, text: str, source: str) -> list[str]:
        """Import the runs of an export (or a `vllm bench serve` result file) given as its text — an
        upload, never a path; returns their ids. Every run is checked first, then all go in as one
        transaction; ImportFailed (one sentence naming the first problem) and nothing imported
        otherwise. A run already in the history (same id) is left alone, so importing a file twice
        adds nothing."""
        if len(text) > MAX_IMPORT_CHARS:
            raise ImportFailed(f"The file is {len(text) / 2**20:.0f} MB; an import reads up to "
                               f"{MAX_IMPORT_CHARS // 2**20} MB: export fewer runs at a time.")
        objs = _json_objects(text)
        if len(objs) > 10_000:
            raise ImportFailed(f"The file holds {len(objs):,} runs; an import takes up to 10,000: export fewer runs "
                               "at a time.")
        runs = []
        for i, obj in enumerate(objs):
            try:
                runs.append(from_bench_json(obj))
            except ImportFailed as e:
                where = f"Run {i + 1} of {len(objs)}" if len(objs) > 1 else "The run"
                raise ImportFailed(f"{where}{_label_note(obj)}: {e}") from None
        source = source[:300]
        with self._lock, self._connect() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                for run in runs:
                    if conn.execute("SELECT 1 FROM runs WHERE id=?", (run.id,)).fetchone() is None:
                        _insert(conn, run, source)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        self._wrote()
        return [r.id for r in runs]

    def import_file(self, path: str | Path, source: str | None = None) -> list[str]:
        """Import the runs of a file on this machine (the CLI, the shipped examples); see import_text."""
        p = Path(path)
        try:
            if not p.exists():
                raise FileNotFoundError(p)
            if not p.is_file():
                raise ImportFailed(f"{p} is not a file: give the JSON file Serving Lab or vllm bench serve wrote.")
            if p.stat().st_size > MAX_IMPORT_CHARS:
                raise ImportFailed(f"{p.name} is {p.stat().st_size / 2**20:.0f} MB; an import reads up to "
                                   f"{MAX_IMPORT_CHARS // 2**20} MB: export fewer runs at a time.")
            text = p.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ImportFailed(f"There is no file {p}: check the path.") from None
        except UnicodeDecodeError:
            raise ImportFailed(f"{p.name} is not UTF-8 text: give the JSON file Serving Lab or vllm bench serve "
                               "wrote.") from None
        except OSError as e:
            raise ImportFailed(f"{p} cannot be read ({e.strerror}).") from None
        return self.import_text(text, source=source or f"import:{p.name}")

    def import_examples(self, folder: str | Path | None = None) -> list[str]:
        """Import every *.json in `folder` (default: the repository's examples/); returns the ids of the
        runs that were new (ones already present are skipped)."""
        folder = Path(folder) if folder is not None else EXAMPLES_DIR
        if not folder.is_dir():
            return []
        before = {r.id for r in self.list()}
        ids: list[str] = []
        for f in sorted(folder.glob("*.json")):
            ids += self.import_file(f, source=f"example:{f.name}")
        return [i for i in ids if i not in before]


def _insert(conn: sqlite3.Connection, run: RunResult, source: str) -> None:
    """Write one run (replacing one with the same id) inside the caller's transaction, credentials left out."""
    run = scrub_run(run)
    rows = [
        (
            run.id, seq, r.index, r.prompt, r.send_time, r.end_time, r.first_token_time,
            _dumps(list(r.chunk_times)), r.prompt_tokens, r.output_tokens, r.tokens_source,
            r.output_text, r.error, int(bool(r.warmup)),
        )
        for seq, r in enumerate(run.records)
    ]
    measured = run.measured
    conn.execute("DELETE FROM requests WHERE run_id=?", (run.id,))
    conn.execute(
        "INSERT OR REPLACE INTO runs (id, kind, scenario, label, started_at, duration, model,"
        " config, command, load, hardware, versions, summary, extra, n_requests, n_failed,"
        " source, saved_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        (
            run.id, run.kind, run.scenario, run.label, float(run.started_at),
            float(run.duration), run.model, _dumps(run.config), run.command,
            _dumps(run.load), _dumps(run.hardware), _dumps(run.versions),
            _dumps(run.summary), _dumps(run.extra), len(measured), sum(1 for r in measured if not r.ok), source,
            time.time(),
        ),
    )
    conn.executemany(
        "INSERT INTO requests (run_id, seq, request_index, prompt, send_time, end_time,"
        " first_token_time, chunk_times, prompt_tokens, output_tokens, tokens_source,"
        " output_text, error, warmup) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        rows,
    )


def _remove_stored_secrets(conn: sqlite3.Connection) -> None:
    """Schema 2: rewrite every stored run without its credentials (see scrub)."""
    cols = ("config", "load", "hardware", "extra")
    for row in conn.execute(f"SELECT id, command, {', '.join(cols)} FROM runs").fetchall():
        new: dict[str, Any] = {}
        if isinstance(row[1], str) and scrub_text(row[1]) != row[1]:
            new["command"] = scrub_text(row[1])
        for col, text in zip(cols, row[2:]):
            try:
                value = json.loads(text) if isinstance(text, str) and text else None
            except (ValueError, RecursionError):
                continue  # unreadable: the page shows the run as damaged, to be deleted
            if value is not None and scrub(value) != value:
                new[col] = _dumps(scrub(value))
        if new:
            conn.execute(f"UPDATE runs SET {', '.join(f'{c}=?' for c in new)} WHERE id=?", [*new.values(), row[0]])
    errors = conn.execute("SELECT run_id, seq, error FROM requests WHERE error IS NOT NULL").fetchall()
    for run_id, seq, error in errors:
        if isinstance(error, str) and scrub_text(error) != error:
            conn.execute("UPDATE requests SET error=? WHERE run_id=? AND seq=?", (scrub_text(error), run_id, seq))


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
        raise ImportFailed(f"The file is not valid JSON ({e.msg} at line {e.lineno}, column {e.colno}): export it "
                           "again from Serving Lab or vllm bench serve.") from None
    except RecursionError:
        raise ImportFailed("The file is nested deeper than any export is: it is not a file Serving Lab or vllm bench "
                           "serve wrote.") from None
    if not out:
        raise ImportFailed("The file holds no runs: export them again from Serving Lab or vllm bench serve.")
    for k, o in enumerate(out):
        if not isinstance(o, dict):
            raise ImportFailed(f"Item {k + 1} of {len(out)} in the file is not a run (a JSON object): export it "
                               "again from Serving Lab or vllm bench serve.")
    return out


# -- what an imported (or stored) run must be -----------------------------------------------------

class _Bad(Exception):
    """What is wrong with one field of a run, e.g. 'records[4].send_time is not a number'."""

    def __init__(self, what: str):
        super().__init__(what)
        self.what = what


class _NotARun(ImportFailed):
    """An object with none of the keys of an export or a vllm bench serve result."""


_MISSING = object()
_REL_S = 1e7  # seconds from a run's start (any time inside a run, its wall time): no run lasts 4 months
_COUNT = 1e9  # tokens of one request, a request's index
_MAX_RECORDS = 200_000
_MAX_CHUNKS = 200_000
_MAX_DEPTH = 20
_LAST_DATE = datetime(9999, 12, 31).timestamp()


def _get(d: dict, key: str, pre: str = "", default: Any = _MISSING) -> Any:
    if key in d:
        return d[key]
    if default is _MISSING:
        raise _Bad(f"{pre}{key} is missing")
    return default


def _text(v: Any, where: str, limit: int, nullable: bool = False) -> Any:
    if v is None and nullable:
        return None
    if not isinstance(v, str):
        raise _Bad(f"{where} is not text")
    if len(v) > limit:
        raise _Bad(f"{where} is longer than {limit:,} characters")
    return v


def _number(v: Any, where: str, lo: float, hi: float, *, nullable: bool = False, whole: bool = False) -> Any:
    if v is None and nullable:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v:
        raise _Bad(f"{where} is not a number")
    if isinstance(v, float) and math.isinf(v):
        raise _Bad(f"{where} is infinite")
    if whole and isinstance(v, float) and not v.is_integer():
        raise _Bad(f"{where} is not a whole number")
    if not lo <= v <= hi:
        raise _Bad(f"{where} is negative" if lo == 0 and v < 0 else f"{where} is out of range ({lo:g} to {hi:g})")
    return int(v) if whole else float(v)


def _object(v: Any, where: str) -> dict:
    """A free-form JSON object (settings, hardware, notes), nested no deeper than _MAX_DEPTH."""
    if not isinstance(v, dict):
        raise _Bad(f"{where} is not an object")
    stack = [(v, 1)]
    while stack:
        x, depth = stack.pop()
        if depth > _MAX_DEPTH:
            raise _Bad(f"{where} is nested deeper than {_MAX_DEPTH} levels")
        stack += [(c, depth + 1) for c in (x.values() if isinstance(x, dict) else x) if isinstance(c, (dict, list))]
    return v


def _times(values: list, where: str) -> list[float]:
    """A list of times in a run; checked at once when it is plainly fine (an export holds ~10^5 of them)."""
    if all(type(t) in (float, int) for t in values) and math.isfinite(sum(values)) \
            and -_REL_S <= min(values, default=0) and max(values, default=0) <= _REL_S:
        return [float(t) for t in values]
    return [_number(t, f"{where}[{k}]", -_REL_S, _REL_S) for k, t in enumerate(values)]


def _record(r: Any, at: str) -> RequestRecord:
    if not isinstance(r, dict):
        raise _Bad(f"{at} is not an object")
    pre = f"{at}."
    send = _number(_get(r, "send_time", pre), f"{at}.send_time", -_REL_S, _REL_S)
    times = {}
    for key in ("end_time", "first_token_time"):
        t = times[key] = _number(r.get(key), f"{at}.{key}", -_REL_S, _REL_S, nullable=True)
        if t is not None and t < send - 1e-6:
            raise _Bad(f"{at}.{key} is before its send_time")
    chunks = _get(r, "chunk_times", pre, [])
    if not isinstance(chunks, list):
        raise _Bad(f"{at}.chunk_times is not a list")
    if len(chunks) > _MAX_CHUNKS:
        raise _Bad(f"{at}.chunk_times holds more than {_MAX_CHUNKS:,} times")
    warmup = _get(r, "warmup", pre, False)
    if warmup not in (True, False):  # 0 and 1 too
        raise _Bad(f"{at}.warmup is not true or false")
    return RequestRecord(
        index=_number(_get(r, "index", pre), f"{at}.index", -_COUNT, _COUNT, whole=True),
        prompt=_text(_get(r, "prompt", pre, ""), f"{at}.prompt", 1_000_000),
        send_time=send, end_time=times["end_time"], first_token_time=times["first_token_time"],
        chunk_times=_times(chunks, f"{at}.chunk_times"),
        prompt_tokens=_number(_get(r, "prompt_tokens", pre, 0), f"{at}.prompt_tokens", 0, _COUNT, whole=True),
        output_tokens=_number(_get(r, "output_tokens", pre, 0), f"{at}.output_tokens", 0, _COUNT, whole=True),
        tokens_source=_text(_get(r, "tokens_source", pre, "usage"), f"{at}.tokens_source", 64),
        output_text=_text(_get(r, "output_text", pre, ""), f"{at}.output_text", 1_000_000),
        error=_text(r.get("error"), f"{at}.error", 20_000, nullable=True),
        warmup=bool(warmup),
    )


def _checked_run(d: dict[str, Any], strict: bool = False) -> RunResult:
    """A RunResult from `d` (RunResult.to_dict() shape) if it keeps every rule, else _Bad naming the first
    field that breaks one. strict (imports): the start must be a date between 2000 and tomorrow; stored
    runs only need a date a calendar can show (older versions saved 0 for an unknown start)."""
    rid = d.get("id", _MISSING)
    if rid is _MISSING:  # the same content gets the same id, so importing it twice adds it once
        rid = "im" + hashlib.sha1(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:10]
    elif not re.fullmatch(r"[\w.:-]{1,64}", _text(rid, "id", 64)):
        raise _Bad("id is not 1 to 64 letters, digits, '.', ':', '-' or '_'")
    kind = _text(_get(d, "kind"), "kind", 64)
    if not kind:
        raise _Bad("kind is empty")
    started = _number(_get(d, "started_at"), "started_at", -math.inf, math.inf)
    if not (_sane_time(started) if strict else 0 <= started <= _LAST_DATE):
        raise _Bad("started_at is not a date between 2000 and now")
    records = _get(d, "records")
    if not isinstance(records, list):
        raise _Bad("records is not a list")
    if len(records) > _MAX_RECORDS:
        raise _Bad(f"records holds more than {_MAX_RECORDS:,} requests")
    summary = _object(_get(d, "summary", default={}), "summary")
    for key, v in summary.items():
        _number(v, f"summary.{_text(key, 'a summary key', 100)}", -math.inf, math.inf, nullable=True)
    versions = _object(_get(d, "versions", default={}), "versions")
    return RunResult(
        id=rid, kind=kind,
        scenario=_text(_get(d, "scenario"), "scenario", 300),
        label=_text(_get(d, "label"), "label", 300),
        records=[_record(r, f"records[{i}]") for i, r in enumerate(records)],
        duration=_number(_get(d, "duration"), "duration", 0, _REL_S),
        started_at=started,
        model=_text(_get(d, "model", default=""), "model", 1000),
        config=_object(_get(d, "config", default={}), "config"),
        command=_text(_get(d, "command", default=""), "command", 100_000),
        load=_object(_get(d, "load", default={}), "load"),
        hardware=_object(_get(d, "hardware", default={}), "hardware"),
        versions=versions,
        summary=summary,
        extra=_object(_get(d, "extra", default={}), "extra"),
    )


def _quote(label: Any) -> str:
    """A label from a file, fit to sit inside a sentence that is shown as Markdown: no markup, short."""
    clean = " ".join(re.sub(r"[^\w .,/+%=-]", " ", re.sub(r"<[^>]*>", "", str(label))).split())
    return f"'{clean[:40]}…'" if len(clean) > 40 else f"'{clean}'"


def _label_note(obj: dict) -> str:
    lab = obj.get("serving_lab")
    label = lab.get("label") if isinstance(lab, dict) else obj.get("label")
    return f" ({_quote(label)})" if isinstance(label, str) and _quote(label) != "''" else ""


# -- the vllm-bench-serve shaped JSON -------------------------------------------------------------

def _summary_for(run: RunResult) -> dict[str, Any]:
    if run.summary:
        return dict(run.summary)
    try:  # stats.py computes the vllm-named metrics; fall back to the basics without it
        from engine.measure.stats import summarize

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
    """One run as a `vllm bench serve` result object (+ "serving_lab": the whole RunResult), without
    credentials."""
    run = scrub_run(run)
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
    """The RunResult inside an export; for a plain `vllm bench serve` file, one rebuilt from it.
    ImportFailed, naming the first field that breaks a rule, when it is not a run this app can show."""
    lab = obj.get("serving_lab", _MISSING)
    if lab is _MISSING and "model_id" not in obj and "completed" not in obj:
        raise _NotARun("it is neither a Serving Lab export nor a vllm bench serve result (it has no 'serving_lab', "
                       "'model_id' or 'completed' key): pick a file one of them wrote.")
    try:
        if lab is _MISSING:
            return _checked_run(_from_vllm_result(obj).to_dict(), strict=True)
        if not isinstance(lab, dict):
            raise _Bad("serving_lab is not an object")
        return _checked_run({k: v for k, v in lab.items() if k != "format"}, strict=True)
    except _Bad as e:
        maker = "vllm bench serve" if lab is _MISSING else "Serving Lab"
        raise ImportFailed(f"{e.what}: export it again from {maker}.") from None


def _vllm_list(obj: dict, key: str, check: Callable[[Any, str], Any]) -> list:
    v = obj.get(key) or []
    if not isinstance(v, list):
        raise _Bad(f"{key} is not a list")
    if len(v) > _MAX_RECORDS:
        raise _Bad(f"{key} holds more than {_MAX_RECORDS:,} requests")
    return [check(x, f"{key}[{i}]") for i, x in enumerate(v)]


def _from_vllm_result(obj: dict[str, Any]) -> RunResult:
    """A run rebuilt from a `vllm bench serve` result's per-request lists (their types checked here,
    the run itself by _checked_run)."""
    def num(x, where):
        return _number(x, where, -_REL_S, _REL_S, nullable=True) or 0.0

    def count(x, where):
        return _number(x, where, 0, _COUNT, nullable=True, whole=True) or 0

    def text(x, where):
        return _text(x, where, 1_000_000, nullable=True) or ""

    def gaps(x, where):
        if not isinstance(x, list):
            raise _Bad(f"{where} is not a list")
        return [_number(g, f"{where}[{k}]", 0, _REL_S) for k, g in enumerate(x)]

    ttfts, lats = _vllm_list(obj, "ttfts", num), _vllm_list(obj, "latencies", num)
    starts, itls = _vllm_list(obj, "start_times", num), _vllm_list(obj, "itls", gaps)
    ins, outs = _vllm_list(obj, "input_lens", count), _vllm_list(obj, "output_lens", count)
    texts, errors = _vllm_list(obj, "generated_texts", text), _vllm_list(obj, "errors", text)
    n = len(ttfts or lats)
    t0 = min(starts) if starts else 0.0
    records = []
    for i in range(n):
        def at(values, default):
            return values[i] if i < len(values) else default

        send = at(starts, t0) - t0
        err = at(errors, "") or None
        lat, ttft = at(lats, 0.0), at(ttfts, 0.0)
        chunks: list[float] = []
        if ttft:
            t = send + ttft
            chunks.append(t)
            for gap in at(itls, []):
                t += gap
                chunks.append(t)
        records.append(RequestRecord(
            index=i, prompt="", send_time=send,
            end_time=None if (err and not lat) else send + lat,
            first_token_time=send + ttft if ttft else None, chunk_times=chunks,
            prompt_tokens=at(ins, 0), output_tokens=at(outs, 0), output_text=at(texts, ""), error=err,
        ))
    skip = {"input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times", "queue_times",
            "generated_texts", "errors", "num_prompts", "request_rate", "burstiness",
            "ramp_up_start_rps", "ramp_up_end_rps"}
    # the metrics: numbers only (vllm writes no NaN, but a file edited elsewhere might)
    summary = {k: v for k, v in obj.items() if k not in skip and
               (v is None or (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)))}
    summary.pop("max_concurrency", None)  # vllm's is the configured limit: kept in load below
    if obj.get("max_concurrent_requests") is not None:
        summary["max_concurrency"] = obj["max_concurrent_requests"]
    date = _text(_get(obj, "date"), "date", 40)
    try:
        started = datetime.strptime(date, "%Y%m%d-%H%M%S").timestamp()
    except ValueError:
        raise _Bad("date is not a date like 20251130-101500") from None
    rate = obj.get("request_rate", "inf")
    if rate != "inf":
        rate = _number(rate, "request_rate", 0, math.inf)
    label = _text(obj.get("label"), "label", 300, nullable=True)
    digest = hashlib.sha1(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:12]
    return RunResult(
        id=f"vb{digest[:10]}",
        kind="vllm",
        scenario="vllm-bench-serve",
        label=label or f"vllm bench serve {date}",
        records=records,
        duration=_number(obj.get("duration") or 0.0, "duration", 0, _REL_S),
        started_at=started,
        model=_text(obj.get("model_id") or "", "model_id", 1000),
        config={"tokenizer": obj["tokenizer_id"]} if obj.get("tokenizer_id") else {},
        load={"backend": obj.get("backend"), "request_rate": float(rate) if rate != "inf" else float("inf"),
              "burstiness": obj.get("burstiness"), "max_concurrency": obj.get("max_concurrency"),
              "num_prompts": obj.get("num_prompts")},
        summary=summary,
        extra={"imported_from": "vllm bench serve"},
    )
