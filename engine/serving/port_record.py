"""A port's record on disk: what a restarted app (or another of its processes) needs to adopt or clean up the
server this app started there, who started it, and who stopped it. See docs/internals.md#server."""
from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path

from engine.messages import Message, say
from engine.serving import proctree
from engine.serving.config import API_SERVER_MODULE
from engine.serving.leftovers import port_lock


class PortRecord:
    """server-PORT.json (the live server: pid, tag, config with its API key, log, family, starter) and
    server-PORT.stopped.json (who stopped it, so another process following it says 'stopped by', not 'died')."""

    def __init__(self, runtime: Path, port: int):
        self.runtime, self.port = runtime, port  # runtime: the folder of its Lab's (or command's) settings

    @property
    def path(self) -> Path:
        return self.runtime / f"server-{self.port}.json"

    @property
    def _stopped_path(self) -> Path:
        return self.runtime / f"server-{self.port}.stopped.json"

    def read(self) -> dict:
        """The record as written, whatever its server's state ({} when there is none or it is unreadable)."""
        try:
            return json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}

    def live(self) -> dict | None:
        """The record when its API server lives (read under the port's lock), else None."""
        rec = self.read()
        api = proctree.same_process(rec["pid"], rec.get("since_boot", -1.0)) if isinstance(rec.get("pid"),
                                                                                           int) else None
        return rec if api is not None and API_SERVER_MODULE in " ".join(proctree.cmdline(api)) else None

    def write(self, rec: dict) -> None:
        """Replace the record at once. It holds the API key (the app must keep talking to an adopted server), so
        it is created 0600, never world-readable for a moment."""
        tmp = self.path.with_suffix(f".tmp{os.getpid()}.{threading.get_ident()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(rec, f, indent=2)
        tmp.replace(self.path)

    def remove(self, pid: int | None = -1) -> None:
        """Remove the record: always (-1: cleaning a dead one's under the lock already held), only while it names
        `pid` (the server its caller ran), or only while its server is not alive (None). Under the port's lock: a
        record another process writes this moment for its new server stays."""
        if pid == -1:
            self.path.unlink(missing_ok=True)
            return
        with port_lock(self.runtime, self.port):
            if (self.read().get("pid") == pid) if pid is not None else self.live() is None:
                self.path.unlink(missing_ok=True)

    def write_stopped(self, pid: int, since_boot: float, by: dict) -> None:
        """Before a tree is stopped: who stops the server `pid` (started `since_boot`)."""
        tmp = self._stopped_path.with_suffix(f".tmp{os.getpid()}.{threading.get_ident()}")
        tmp.write_text(json.dumps({"pid": pid, "since_boot": since_boot, "by": by}))
        tmp.replace(self._stopped_path)

    def stopped_by(self, pid: int | None, since_boot: float | None) -> dict | None:
        """Who stopped the server `pid` started `since_boot`, when another process did (its note names it)."""
        try:
            note = json.loads(self._stopped_path.read_text())
        except (OSError, ValueError):
            return None
        if note.get("pid") == pid and since_boot is not None and abs(note.get("since_boot", -1) - since_boot) < 0.05:
            return note.get("by") or {}
        return None


def command() -> str:
    """This process's CLI subcommand (serve, run …), for the record's starter."""
    return sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].startswith("-") else ""


def starter_said(starter: dict | None) -> Message:
    """Who started a server, from its record: the app (this one, another one still running, or one that
    was restarted since) or a command of the CLI, with its pid."""
    starter = starter or {}
    pid = starter.get("pid")
    if starter.get("kind") == "cli":
        return say("`python -m engine {command}` (pid {pid})", command=starter.get("command") or "serve", pid=pid)
    if starter.get("kind") == "app" and isinstance(pid, int):
        if pid == os.getpid():
            return say("this app (pid {pid})", pid=pid)
        if proctree.same_process(pid, None) is not None:
            return say("another app process on this data folder (pid {pid})", pid=pid)
        return say("an earlier run of the app (pid {pid}), before it restarted", pid=pid)
    return say("an earlier run of the app or the command line")


def holder_said(rec: dict, port: int) -> Message:
    """One sentence for whoever comes second to a port: who holds it and what to do."""
    return say("Port {port} is held by a vLLM server that {who} started (API server pid {pid}): use that one (the "
               "app follows it; `python -m engine run SCENARIO --url http://127.0.0.1:{port}` measures it), or stop it "
               "first with `python -m engine stop --port {port}`.", port=port, who=starter_said(rec.get("starter")),
               pid=rec.get("pid"))
