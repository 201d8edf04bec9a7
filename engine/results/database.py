"""The history's SQLite file: its tables, a run as rows and back, and how the file is kept (0600, WAL, migrations).
See docs/internals.md#database."""
from __future__ import annotations

import functools
import json
import math
import os
import sqlite3
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from engine.errors import LabError
from engine.messages import mark, say
from engine.results.credentials import scrub, scrub_run, scrub_text
from engine.results.records import V5_KEYS, Load, Notes, RunResult, RunRow, Summary, from_v5, is_sane_time
from engine.results.validation import Invalid, RunDamaged, checked_run, quote

SCHEMA_VERSION = 6  # 1: the tables; 2: no secrets in stored runs; 3: requests.cached_tokens;
# 4: requests.conversation, turn, planned_time (multi-turn chats, planned sends); 5: requests.slot_wait (a cap);
# 6: runs.extra in parts by concept (records.Notes), no longer flat

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
    cached_tokens     INTEGER,
    conversation      INTEGER,
    turn              INTEGER,
    planned_time      REAL,
    slot_wait         REAL,
    PRIMARY KEY (run_id, seq)
)""",
]


# -- the file ---------------------------------------------------------------------------------------

def private_file(path: Path) -> None:
    """Create the database file readable by its owner only, before sqlite opens it (sqlite gives the
    -wal and -shm files the database's mode); tighten a file an older version left world-readable."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as e:
        raise LabError(say("The run history {path} cannot be opened ({why}): set SERVING_LAB_DB to a file "
                           "you can write.", path=str(path), why=e.strerror)) from None
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


def file_stamp(path: str) -> tuple[int, int, int] | None:
    """What changes when another process writes the file: its time, size and inode."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    # An empty -wal comes and goes with every connection: the same as none.
    return (st.st_mtime_ns, st.st_size, st.st_ino) if st.st_size else None


@contextmanager
def connect(path: Path) -> Iterator[sqlite3.Connection]:
    """A short-lived connection: autocommit mode (transaction() begins and commits), closed on exit."""
    conn = sqlite3.connect(str(path), timeout=30.0, isolation_level=None, check_same_thread=False)
    try:
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute("PRAGMA busy_timeout=30000")
        yield conn
    finally:
        conn.close()


@contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One write transaction: committed when the block ends, rolled back when it raises."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def migrate(conn: sqlite3.Connection, path: Path) -> bool:
    """Put the file in WAL mode and bring it to SCHEMA_VERSION (in one transaction, so two processes
    opening an old file at once migrate it once); True when it wrote."""
    conn.execute("PRAGMA journal_mode=WAL")
    if conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION:
        return False
    conn.execute("PRAGMA secure_delete=ON")  # pages freed by the clean-up are zeroed, not left behind
    with transaction(conn):
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise LabError(say("The run history {path} was written by a newer Serving Lab (schema {version}, "
                               "this one reads up to {supported}): update this app, or set SERVING_LAB_DB to "
                               "another file.", path=str(path), version=version, supported=SCHEMA_VERSION))
        for statement in _SCHEMA:
            conn.execute(statement)
        if version < 2:
            _remove_stored_secrets(conn)
        have = {c[1] for c in conn.execute("PRAGMA table_info(requests)")}
        for column, kind in (("cached_tokens", "INTEGER"), ("conversation", "INTEGER"), ("turn", "INTEGER"),
                             ("planned_time", "REAL"), ("slot_wait", "REAL")):
            if column not in have:  # NULL: not reported, or a run saved before the column
                conn.execute(f"ALTER TABLE requests ADD COLUMN {column} {kind}")
        if version < 6:
            _notes_in_parts(conn)
        conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
    # The old pages are still in the WAL until a checkpoint copies the clean ones over them.
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return True


def _remove_stored_secrets(conn: sqlite3.Connection) -> None:
    """Schema 2: rewrite every stored run without its credentials (see credentials.scrub)."""
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


def _notes_in_parts(conn: sqlite3.Connection) -> None:
    """Schema 6: every stored run's notes rewritten from schema 5's flat keys into their parts (records.from_v5)."""
    for run_id, text in conn.execute("SELECT id, extra FROM runs").fetchall():
        try:
            flat = json.loads(text) if isinstance(text, str) and text else None
        except (ValueError, RecursionError):
            continue  # unreadable: the page shows the run as damaged, to be deleted
        if isinstance(flat, dict) and any(k in V5_KEYS for k in flat):
            conn.execute("UPDATE runs SET extra=? WHERE id=?", (_dumps(Notes.from_dict(from_v5(flat)).to_dict()),
                                                                 run_id))


# -- writing (inside the caller's transaction) --------------------------------------------------------

def _dumps(obj: Any) -> str:
    # allow_nan: Python's json (and vllm's result files) keep inf/NaN (a request rate of inf).
    return json.dumps(obj, ensure_ascii=False, default=str)


def insert_run(conn: sqlite3.Connection, run: RunResult, source: str) -> None:
    """Write one run (replacing one with the same id), credentials left out."""
    run = scrub_run(run)
    rows = [
        (
            run.id, seq, r.index, r.prompt, r.send_time, r.end_time, r.first_token_time,
            _dumps(list(r.chunk_times)), r.prompt_tokens, r.output_tokens, r.tokens_source,
            r.output_text, r.error, int(bool(r.warmup)), r.cached_tokens, r.conversation, r.turn, r.planned_time,
            r.slot_wait,
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
            _dumps(run.load.to_dict()), _dumps(run.hardware), _dumps(run.versions),
            _dumps(run.summary.to_dict()), _dumps(run.extra.to_dict()), len(measured),
            sum(1 for r in measured if not r.ok), source,
            time.time(),
        ),
    )
    conn.executemany(
        "INSERT INTO requests (run_id, seq, request_index, prompt, send_time, end_time,"
        " first_token_time, chunk_times, prompt_tokens, output_tokens, tokens_source,"
        " output_text, error, warmup, cached_tokens, conversation, turn, planned_time, slot_wait)"
        " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        rows,
    )


def delete_runs(conn: sqlite3.Connection, ids: list[str]) -> int:
    """Delete runs and their requests; how many runs went."""
    marks = ",".join("?" * len(ids))
    conn.execute(f"DELETE FROM requests WHERE run_id IN ({marks})", ids)
    return conn.execute(f"DELETE FROM runs WHERE id IN ({marks})", ids).rowcount


def relabel_run(conn: sqlite3.Connection, run_id: str, label: str) -> bool:
    """Change a run's label; False when there is no such run."""
    return conn.execute("UPDATE runs SET label=? WHERE id=?", (label, run_id)).rowcount > 0


# -- reading ----------------------------------------------------------------------------------------

def has_run(conn: sqlite3.Connection, run_id: str) -> bool:
    return conn.execute("SELECT 1 FROM runs WHERE id=?", (run_id,)).fetchone() is not None


def count_runs(conn: sqlite3.Connection) -> int:
    return conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0]


def list_rows(conn: sqlite3.Connection, limit: int | None = None, kind: str | None = None) -> list[RunRow]:
    """Saved runs, newest first, without their request rows; an odd row comes with its `problem`."""
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
    return [_row(r) for r in conn.execute(sql, args).fetchall()]


def read_run(conn: sqlite3.Connection, run_id: str) -> RunResult | None:
    """The full run with its records, exactly as saved; None when there is none; RunDamaged (a
    sentence) for a stored run that breaks the rules an import is held to."""
    row = conn.execute(
        "SELECT id, kind, scenario, label, started_at, duration, model, config, command, load,"
        " hardware, versions, summary, extra FROM runs WHERE id=?",
        (run_id,),
    ).fetchone()
    if row is None:
        return None
    reqs = conn.execute(
        "SELECT request_index, prompt, send_time, end_time, first_token_time, chunk_times,"
        " prompt_tokens, output_tokens, tokens_source, output_text, error, warmup, cached_tokens,"
        " conversation, turn, planned_time, slot_wait FROM requests WHERE run_id=? ORDER BY seq",
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
                "cached_tokens": q[12], "conversation": q[13], "turn": q[14], "planned_time": q[15],
                "slot_wait": q[16],
            } for q in reqs],
        }
        return checked_run(d)
    except (Invalid, ValueError, RecursionError) as e:
        why = e.what if isinstance(e, Invalid) else say("a stored field is not valid JSON")
        raise RunDamaged(say("The run {label} in the history is damaged ({why}): delete it, and import it again "
                             "from an export if you have one.", label=quote(_text_of(row[3])), why=why)) from None


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
            problems.append(say("its {what} is not a number", what=what))
            return 0 if integer else 0.0
        return int(v) if integer else float(v)

    def obj(v, what: str) -> dict:
        try:
            d = _loads(_text_of(v), {})
        except (ValueError, RecursionError):
            d = None
        if not isinstance(d, dict):
            problems.append(say("its {what} is unreadable", what=what))
            return {}
        return d

    started = r[4]
    if not is_sane_time(started):
        problems.append(say("its start time is not a date between 2000 and now"))
        started = 0.0
    summary = {k: v for k, v in obj(r[11], "summary").items()
               if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}
    return RunRow(
        id=_text_of(r[0]), kind=_text_of(r[1]), scenario=_text_of(r[2]), label=_text_of(r[3]),
        started_at=float(started), duration=number(r[5], mark("wall time")), model=_text_of(r[6]),
        n_requests=number(r[7], mark("request count"), True), n_failed=number(r[8], mark("failure count"), True),
        source=_text_of(r[9]), saved_at=r[10] if isinstance(r[10], (int, float)) else 0.0,
        summary=Summary.from_dict(summary), config=obj(r[12], "config"), load=Load.from_dict(obj(r[13], "load")),
        hardware=obj(r[14], "hardware"), versions=obj(r[15], "versions"), extra=Notes.from_dict(obj(r[16], "extra")),
        command=_text_of(r[17]),
        problem=_joined(problems),
    )


def _joined(parts: list[str]) -> str:
    """The parts joined by "; ", as one Message when they are Messages (each said in the viewer's language)."""
    return functools.reduce(lambda a, b: say("{first}; {then}", first=a, then=b), parts) if parts else ""
