"""RunStore, the run history as the app uses it: save, delete, list, load, export and import runs.
See docs/internals.md#store."""
from __future__ import annotations

import builtins
import sqlite3
import threading
from collections import OrderedDict
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from engine.errors import LabError
from engine.messages import say
from engine.results import database as db
from engine.results import exchange
from engine.results.records import RunResult, RunRow
from engine.results.validation import ImportFailed, RunDamaged

# Where the repository ships example runs (e.g. made headless on an H200).
EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "examples"

# Per database file, shared by every RunStore of this process: the write lock, and a counter of
# committed writes that makes the change token move at once for this process's own writes.
_locks: dict[str, threading.RLock] = {}
_writes: dict[str, int] = {}
_locks_guard = threading.Lock()


def _lock_for(key: str) -> threading.RLock:
    with _locks_guard:
        _writes.setdefault(key, 0)
        return _locks.setdefault(key, threading.RLock())


class RunNotFound(LabError, KeyError):
    """No run with that id in the history."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else say("run not found")


def _not_found(run_id: str) -> RunNotFound:
    return RunNotFound(say("No run {run_id!r} in the history; it may have been deleted.", run_id=run_id))


class RunStore:
    """The run history in the SQLite file at `path` (the app's: its Settings' `db`, $SERVING_LAB_DB, else
    history.sqlite in the data home)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._key = str(self.path.resolve())
        self._lock = _lock_for(self._key)
        self._cache: OrderedDict[tuple, Any] = OrderedDict()
        self._cache_token: tuple | None = None
        self._cache_lock = threading.Lock()
        db.private_file(self.path)
        with self._lock, db.connect(self.path) as conn:
            migrated = db.migrate(conn, self.path)
        if migrated:
            self._wrote()

    # -- plumbing ---------------------------------------------------------------------------------

    @contextmanager
    def _writing(self) -> Iterator[sqlite3.Connection]:
        """A connection in one write transaction, serialized with this process's other writers; the
        change token moves once it is committed."""
        with self._lock, db.connect(self.path) as conn, db.transaction(conn):
            yield conn
        self._wrote()

    def _wrote(self) -> None:
        with _locks_guard:
            _writes[self._key] += 1

    def change_token(self) -> tuple:
        """Changes whenever the history may have: this process's writes (a counter) and other
        processes' (the database and -wal files' size and time). Cheap: two stat calls."""
        with _locks_guard:
            n = _writes[self._key]
        return n, db.file_stamp(str(self.path)), db.file_stamp(f"{self.path}-wal")

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
        Credentials in it are not stored (see credentials.scrub_run)."""
        with self._writing() as conn:
            db.insert_run(conn, run, source)
        return run.id

    def delete(self, ids: str | Iterable[str]) -> int:
        """Delete runs (and their requests); returns how many runs were removed."""
        ids = [ids] if isinstance(ids, str) else list(ids)
        if not ids:
            return 0
        with self._writing() as conn:
            return db.delete_runs(conn, ids)

    def rename(self, run_id: str, label: str) -> None:
        """Change a run's legend label."""
        with self._writing() as conn:
            found = db.relabel_run(conn, run_id, label)
        if not found:
            raise _not_found(run_id)

    # -- reading ----------------------------------------------------------------------------------

    def list(self, limit: int | None = None, kind: str | None = None) -> list[RunRow]:
        """Saved runs, newest first, without their request rows. A row that is odd (an older
        database, a hand edit) is listed with its `problem`, never raises."""
        with db.connect(self.path) as conn:
            return db.list_rows(conn, limit, kind)

    # builtins.list from here on: in this class's body `list` names the method above
    def list_cached(self, limit: int | None = None, kind: str | None = None) -> builtins.list[RunRow]:
        """`list()`, read once per change of the history (see change_token) and shared by every
        caller until then: for pages that redraw every second. Do not modify what it returns."""
        return self._cached(("list", limit, kind), lambda: self.list(limit, kind))

    def __contains__(self, run_id: str) -> bool:
        with db.connect(self.path) as conn:
            return db.has_run(conn, run_id)

    def __len__(self) -> int:
        with db.connect(self.path) as conn:
            return db.count_runs(conn)

    def load(self, run_id: str) -> RunResult:
        """The full run with its records, exactly as saved; RunDamaged (a sentence) for a stored run
        that breaks the rules an import is held to."""
        with db.connect(self.path) as conn:
            run = db.read_run(conn, run_id)
        if run is None:
            raise _not_found(run_id)
        return run

    def load_cached(self, run_id: str) -> RunResult:
        """`load()`, read once per change of the history and shared by every caller until then. Do
        not modify what it returns."""
        return self._cached(("load", run_id), lambda: self.load(run_id), keep=32)

    # -- export -----------------------------------------------------------------------------------

    def export_json(self, ids: str | Iterable[str] | None = None, indent: int | None = 1) -> str:
        """A JSON array, one object per run (vllm-bench-serve keys + "serving_lab"); None = all runs.
        Damaged runs (see load) and runs deleted meanwhile are left out."""
        return exchange.export_json(self._runs(ids), indent=indent)

    def export_csv(self, ids: str | Iterable[str] | None = None, per: str = "request") -> str:
        """CSV of the runs (None = all): one row per request, each carrying its run's columns, or with
        per="run" one row per run (its summary, vllm bench serve's keys)."""
        runs = self._runs(ids)
        return exchange.export_runs_csv(runs) if per == "run" else exchange.export_csv(runs)

    def _runs(self, ids: str | Iterable[str] | None) -> builtins.list[RunResult]:
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

    def import_text(self, text: str, source: str) -> builtins.list[str]:
        """Import the runs of an export (or a `vllm bench serve` result file) given as its text — an
        upload, never a path; returns their ids. Every run is checked first, then all go in as one
        transaction; ImportFailed (one sentence naming the first problem) and nothing imported
        otherwise. A run already in the history (same id) is left alone, so importing a file twice
        adds nothing."""
        runs = exchange.runs_from_text(text)
        source = source[:300]
        with self._writing() as conn:
            for run in runs:
                if not db.has_run(conn, run.id):
                    db.insert_run(conn, run, source)
        return [r.id for r in runs]

    def import_upload(self, data: bytes, name: str) -> builtins.list[str]:
        """Import an uploaded file's bytes (see import_text); ImportFailed when they are not UTF-8 text."""
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise ImportFailed(say("'{name}' is not a text file (not UTF-8): pick the JSON file Serving "
                                            "Lab or vllm bench serve wrote.", name=name)) from None
        return self.import_text(text, source=f"import:{name}")

    def import_file(self, path: str | Path, source: str | None = None) -> builtins.list[str]:
        """Import the runs of a file on this machine (the CLI, the shipped examples); see import_text."""
        text = exchange.read_import_file(path)
        return self.import_text(text, source=source or f"import:{Path(path).name}")

    def import_examples(self, folder: str | Path | None = None) -> builtins.list[str]:
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
