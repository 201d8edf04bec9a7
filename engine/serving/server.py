"""VLLMServer: owns one vLLM server — its whole process tree — on one port: start, startup stages read
from its log, health, stop (really stopped), and adoption after the app itself was killed.

The API server runs in its own session (process group) and every process of the tree carries a tag
(proctree.py), and the descendants are recorded as they appear. So when the API server dies for any
reason the rest of its tree is stopped at once, and what the app started is found again after the
app itself died: a new VLLMServer on the same port adopts a live server from its record
(runtime_dir()/server-<port>.json), or stops what is left of a dead one. A start has a deadline. A
process the app did not start is reported, never killed.
"""
from __future__ import annotations

import json
import os
import subprocess
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import httpx
import psutil

from engine.errors import LeftoversHold, PortInUse, ServerBusy, ServerFailed
from engine.messages import Message, mark, say, say_n
from engine.paths import runtime_dir
from engine.serving import proctree
from engine.serving.config import API_SERVER_MODULE, ServerConfig, port_is_free
from engine.serving.leftovers import home, leftovers, leftovers_sentence
from engine.serving.vllm_log import (
    KV_TOKENS,
    MAX_CONCURRENCY,
    STAGES,
    after_ready,
    ago,
    describe_death,
    describe_failure,
)

# A server's states; each compares equal to its English word, and a sentence that names one says it in
# the viewer's language. Stages and the events on the memory charts are such phrases too (mark()).
STOPPED, STARTING, READY = mark("stopped"), mark("starting"), mark("ready")
STOPPING, FAILED = mark("stopping"), mark("failed")

@dataclass
class Snapshot:
    """What a page or the CLI shows; a copy, safe to read from any thread."""

    state: str
    stage: str = ""
    started_at: float | None = None  # epoch s of Start
    stage_at: float | None = None
    ready_at: float | None = None
    pid: int | None = None
    config: ServerConfig | None = None
    command: str = ""
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None  # at max-model-len tokens per request
    error: str | None = None
    log_tail: list[str] = field(default_factory=list)
    events: list[tuple[float, str]] = field(default_factory=list)  # (epoch s, label) for charts
    adopted: bool = False
    notice: str | None = None  # what the app cleaned up on its own (a dead server's leftovers)

    @property
    def elapsed(self) -> float | None:
        if self.started_at is None:
            return None
        return (self.ready_at or time.time()) - self.started_at


MAX_EVENTS = 200  # lifecycle and benchmark markers kept across restarts


class VLLMServer:
    """One vLLM server on one port, and every process of its tree. Thread-safe; every public method
    but stop() returns quickly."""

    def __init__(self, port: int = 9000, python: str | None = None, poll_s: float = 0.5,
                 start_timeout_s: float | None = None, serving_grace_s: float = 30.0):
        self.port = port
        self.python = python
        self.poll_s = poll_s
        # A start that never reaches "serving" ends as failed (CPU compile ~100 s, 8B on a GPU ~2 min).
        self.start_timeout_s = start_timeout_s or float(os.environ.get("SERVING_LAB_START_TIMEOUT_S", 1200))
        # vLLM says it serves but nothing answers on our port (a --port smuggled in): failed after this.
        self.serving_grace_s = serving_grace_s
        self._lock = threading.RLock()
        self._proc: subprocess.Popen | None = None
        self._pid: int | None = None
        self._tag: proctree.Tag | None = None
        self._family: dict[int, float] = {}  # descendants seen so far: pid -> create time
        self._snap = Snapshot(state=STOPPED)
        self._log_path: Path | None = None
        self._tail: deque[str] = deque(maxlen=400)
        self._watcher: threading.Thread | None = None
        self._stop_watch = threading.Event()
        self.adopt_or_clean()

    # -- public --------------------------------------------------------------------------------
    @property
    def record_path(self) -> Path:
        return runtime_dir() / f"server-{self.port}.json"

    def snapshot(self) -> Snapshot:
        with self._lock:
            s = self._snap
            return Snapshot(**{**s.__dict__, "log_tail": list(self._tail)[-60:], "events": list(s.events)})

    def start(self, cfg: ServerConfig, model_max_len: int | None = None, known_flags: set[str] | None = None) -> None:
        """Validate, check the port and leftovers, launch. Returns at once; watch snapshot() for stages."""
        if cfg.port != self.port:
            cfg = cfg.with_changes(port=self.port)
        cfg.validate(model_max_len=model_max_len, known_flags=known_flags)
        with self._lock:
            if self._snap.state in (STARTING, READY, STOPPING):
                raise ServerBusy(say("A vLLM server is already {state} on port {port}: stop it first, or use Restart.",
                                     state=self._snap.state, port=self.port))
            if left := leftovers():
                raise LeftoversHold(leftovers_sentence(left))
            if not port_is_free(cfg.port, cfg.host):
                raise PortInUse(self._port_owner_sentence(cfg.port))
            self._tag = proctree.Tag(home(), self.port, uuid.uuid4().hex[:12])
            self._log_path = runtime_dir() / f"server-{self.port}.log"
            fd = os.open(self._log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            env = {**os.environ, **cfg.env(), "PYTHONUNBUFFERED": "1", proctree.TAG_ENV: str(self._tag)}
            argv = cfg.argv(self.python)
            now = time.time()
            try:
                self._proc = subprocess.Popen(argv, stdout=fd, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                              env=env, start_new_session=True)
            finally:
                os.close(fd)
            self._pid = self._proc.pid
            self._family = {}
            self._tail.clear()
            self._snap = Snapshot(
                state=STARTING, stage=mark("launching"), started_at=now, stage_at=now, pid=self._pid, config=cfg,
                # the earlier starts' markers stay (a restart within a comparison): the Monitor still names
                # the runs whose load it draws before this start
                command=cfg.shell_command(), events=[*self._snap.events[-MAX_EVENTS:], (now, mark("server start"))],
            )
            self._write_record(cfg, argv, now)
            self._spawn_watcher()

    def stop(self, grace_s: float = 20.0) -> None:
        """SIGTERM to the whole tree (process group, recorded descendants, tagged processes), SIGKILL
        after the grace period. Blocks until every process is gone."""
        with self._lock:
            if self._pid is None:
                self._set(state=STOPPED, stage="")
                self._remove_record()
                return
            self._set(state=STOPPING, stage=mark("stopping"))
        self._stop_watch.set()
        self._stop_tree(grace_s)
        with self._lock:
            self._proc, self._pid = None, None
            self._remove_record()
            snap = self._snap
            self._snap = Snapshot(
                state=STOPPED, config=snap.config, command=snap.command,
                events=snap.events + [(time.time(), mark("server stop"))],
                kv_cache_tokens=snap.kv_cache_tokens, max_concurrency=snap.max_concurrency,
            )

    def restart(self, cfg: ServerConfig, **kw) -> None:
        self.stop()
        self.start(cfg, **kw)

    def wait_ready(self, timeout_s: float = 600, on_stage: Callable[[Snapshot], None] | None = None) -> Snapshot:
        """Block until ready; raise ServerFailed with the cause if it fails or times out. `on_stage`
        sees the snapshot each time the startup stage changes."""
        deadline = time.time() + timeout_s
        last = None
        while time.time() < deadline:
            s = self.snapshot()
            if on_stage is not None and s.stage != last:
                last = s.stage
                on_stage(s)
            if s.state == READY:
                return s
            if s.state in (FAILED, STOPPED):
                raise ServerFailed(s.error or say("The server stopped before it was ready."))
            time.sleep(0.2)
        raise ServerFailed(say("The server was not ready after {timeout_s:.0f} s: see its log, or stop it and try "
                               "smaller settings.", timeout_s=timeout_s))

    def start_and_wait(self, cfg: ServerConfig, model_max_len: int | None = None,
                       log: Callable[[str], None] = print, timeout_s: float = 1800) -> Snapshot:
        """start() then wait_ready(), logging the command, each startup stage and the ready line
        (the headless CLI's and scenarios' view of a start)."""
        self.start(cfg, model_max_len=model_max_len)
        log(cfg.shell_command())
        s = self.wait_ready(timeout_s, on_stage=lambda s: log(f"  [{s.elapsed or 0:6.1f} s] {s.stage}"))
        kv = f"; KV cache {s.kv_cache_tokens:,} tokens" if s.kv_cache_tokens else ""
        mc = f", max concurrency {s.max_concurrency:g}x" if s.max_concurrency else ""
        log(f"ready in {s.elapsed:.1f} s at {cfg.base_url}{kv}{mc}")
        return s

    def health(self, timeout: float = 2.0) -> bool:
        cfg = self._snap.config
        url = (cfg.base_url if cfg else f"http://127.0.0.1:{self.port}") + "/health"
        try:
            return httpx.get(url, timeout=timeout).status_code == 200
        except httpx.HTTPError:
            return False

    def mark(self, label: str) -> None:
        """Add a lifecycle/benchmark marker for the memory charts."""
        with self._lock:
            self._snap.events.append((time.time(), label))

    # -- adoption and leftovers ---------------------------------------------------------------
    def adopt_or_clean(self) -> None:
        """After the app (or the CLI) was restarted: adopt the server this app started on this port if
        its API server lives; else stop whatever is left of it, and say so in the snapshot's notice."""
        try:
            rec = json.loads(self.record_path.read_text())
        except (OSError, ValueError):
            rec = {}
        api = proctree.same_process(rec["pid"], rec.get("since_boot", -1.0)) if isinstance(rec.get("pid"), int) else None
        if api is not None and API_SERVER_MODULE in " ".join(_cmdline(api)):
            self._adopt(rec)
        else:
            self._remove_record()
        # Anything else of this app on this port is a leftover: the tree of a server whose API server
        # died, or a start interrupted before its record was written.
        keep = self._tag.start_id if self._tag else None
        found = {p.pid: p for p, tag in proctree.tagged(home(), self.port) if tag.start_id != keep}
        if api is None and isinstance(rec.get("pid"), int):
            # The dead API server's session (its renamed children carry no readable tag), unless its pid
            # now leads someone else's session, and the descendants recorded before it died.
            if not psutil.pid_exists(rec["pid"]):
                for p in proctree.session(rec["pid"]):
                    found.setdefault(p.pid, p)
            for pid, ct in (rec.get("family") or {}).items():
                if p := proctree.same_process(int(pid), ct):
                    found.setdefault(p.pid, p)
        if left := list(found.values()):
            names, freed = [proctree.name(p) for p in left], proctree.held(left)
            proctree.stop(left, grace_s=10)
            with self._lock:
                self._snap.notice = say_n(
                    "A vLLM server this app started on port {port} had lost its API server; its {n} leftover "
                    "process ({names}) was stopped and {freed} returned.",
                    "A vLLM server this app started on port {port} had lost its API server; its {n} leftover "
                    "processes ({names}) were stopped and {freed} returned.",
                    len(left), port=self.port, names=", ".join(names), freed=freed)

    def _adopt(self, rec: dict) -> None:
        cfg = ServerConfig.from_dict(rec["config"])
        self._pid = rec["pid"]
        self._tag = proctree.Tag.parse(rec.get("tag"))
        self._family = {int(k): v for k, v in (rec.get("family") or {}).items()}
        self._log_path = Path(rec["log"])
        started = rec.get("started_at", time.time())
        self._snap = Snapshot(
            state=STARTING, stage=mark("adopting"), started_at=started, stage_at=time.time(), pid=self._pid,
            config=cfg, command=cfg.shell_command(), adopted=True,
            events=[(started, mark("server start")), (time.time(), mark("adopted after app restart"))],
        )
        if self.health(timeout=1.0):  # a healthy orphan is ready at once, not after the first poll
            now = time.time()
            self._set(state=READY, stage=mark("serving"), ready_at=now, stage_at=now)
        self._spawn_watcher()

    # -- internals ----------------------------------------------------------------------------
    def _set(self, **kw) -> None:
        with self._lock:
            for k, v in kw.items():
                setattr(self._snap, k, v)

    def _write_record(self, cfg: ServerConfig, argv: list[str], started_at: float) -> None:
        """What a restarted app needs to adopt or clean up this server. Holds the API key (the app must
        keep talking to an adopted server), so it is created 0600, never world-readable for a moment."""
        rec = {
            "pid": self._pid, "since_boot": proctree.since_boot(psutil.Process(self._pid)), "tag": str(self._tag),
            "port": self.port, "argv": argv, "config": cfg.to_dict() | {"api_key": cfg.api_key},
            "started_at": started_at, "log": str(self._log_path), "family": self._family,
        }
        tmp = self.record_path.with_suffix(f".tmp{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(rec, f, indent=2)
        tmp.replace(self.record_path)

    def _remove_record(self) -> None:
        try:
            self.record_path.unlink()
        except FileNotFoundError:
            pass

    def _tree(self) -> list[psutil.Process]:
        """Every live process of this server: the API server and its descendants now, its session (the
        renamed children whose tag cannot be read), the descendants recorded earlier (re-parented to init
        if the API server died), and anything with our tag."""
        procs = {p.pid: p for p in proctree.family(self._pid)} if self._pid else {}
        if self._pid:
            procs.update((p.pid, p) for p in proctree.session(self._pid))
        for pid, ct in self._family.items():
            if pid not in procs and (p := proctree.same_process(pid, ct)):
                procs[pid] = p
        if self._tag:
            for p, tag in proctree.tagged(self._tag.home, self.port):
                if tag.start_id == self._tag.start_id:
                    procs.setdefault(p.pid, p)
        return list(procs.values())

    def _stop_tree(self, grace_s: float) -> tuple[list[str], str]:
        """Stop the whole tree; returns the names of the processes besides the API server, and their memory."""
        procs = self._tree()
        others = [p for p in procs if p.pid != self._pid]
        names, freed = [proctree.name(p) for p in others], proctree.held(others)
        # The process group is the API server's pid (start_new_session); signal it only while one of our
        # own processes is still in it, so a recycled group id is never hit.
        group = self._pid if any(_pgid(p) == self._pid for p in procs) else None
        proctree.stop(procs, grace_s, group=group)
        if self._proc is not None:
            try:
                self._proc.wait(timeout=1)
            except subprocess.TimeoutExpired:
                pass
        return names, freed

    def _track_family(self) -> None:
        """Record descendants as they appear, so they can be found after the API server is gone."""
        new = [p for p in proctree.family(self._pid)[1:] if p.pid not in self._family]
        if not new:
            return
        with self._lock:
            if self._snap.state not in (STARTING, READY) or self._snap.config is None:
                return  # stopping: the record is going away
            for p in new:
                try:
                    self._family[p.pid] = proctree.since_boot(p)
                except psutil.Error:
                    pass
            self._write_record(self._snap.config, _cmdline_of(self._pid), self._snap.started_at or time.time())

    def _port_owner_sentence(self, port: int) -> Message:
        for c in psutil.net_connections(kind="inet"):
            if c.laddr and c.laddr.port == port and c.status == psutil.CONN_LISTEN and c.pid:
                try:
                    name = psutil.Process(c.pid).name()
                except psutil.Error:
                    name = "unknown"
                return say("Port {port} is already in use by another program ({name}, pid {pid}); it was left alone: "
                           "stop that program or pick another port.", port=port, name=name, pid=c.pid)
        return say("Port {port} is already in use by another program: stop it or pick another port.", port=port)

    def _spawn_watcher(self) -> None:
        self._stop_watch = threading.Event()
        self._watcher = threading.Thread(target=self._watch, args=(self._stop_watch,), daemon=True, name=f"vllm-watch-{self.port}")
        self._watcher.start()

    def _watch(self, stop: threading.Event) -> None:
        """Follow the log for stages, poll /health until ready, record new descendants, and notice the
        API server dying (then stop the rest of its tree), a start past its deadline, or a server that
        says it serves where the app cannot reach it."""
        pos = 0
        stage_idx = -1
        silent_since: float | None = None
        while not stop.is_set():
            pos = self._read_log(pos)
            with self._lock:
                lines = list(self._tail)
            stage_idx = self._update_stage(lines, stage_idx)
            state = self._snap.state
            if not _pid_alive(self._pid):
                if state in (STARTING, READY):
                    self._read_log(pos)
                    self._died(state)
                return
            self._track_family()
            if state == STARTING:
                if self.health(timeout=1.0):
                    now = time.time()
                    with self._lock:
                        self._snap.events.append((now, mark("ready")))
                        self._set(state=READY, stage=mark("serving"), ready_at=now, stage_at=now)
                elif time.time() - (self._snap.started_at or time.time()) > self.start_timeout_s:
                    self._give_up(say("vLLM was not ready {after} after Start (it was at '{stage}'), so it was "
                                      "stopped: see the log below, then start again with smaller settings.",
                                      after=ago(self.start_timeout_s), stage=self._snap.stage))
                    return
                elif self._snap.stage == "serving":
                    silent_since = silent_since or time.time()
                    if time.time() - silent_since > self.serving_grace_s:
                        self._give_up(say("vLLM says it is serving, but nothing answers on port {port} where the app "
                                          "looks for it, so it was stopped: remove any flag that moves it (such as "
                                          "--port or --root-path) and start again.", port=self.port))
                        return
            stop.wait(self.poll_s)

    def _died(self, state: str) -> None:
        """The API server is gone: stop the rest of its tree and say what happened in one sentence."""
        rc = None
        if self._proc is not None:
            try:  # the leader of a killed multi-threaded process shows as a zombie before it can be reaped
                rc = self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        api_pid = self._pid
        names, freed = self._stop_tree(grace_s=10)
        with self._lock:
            lines = list(self._tail)
            if state == STARTING:
                msg = describe_failure(lines, rc)
            else:
                msg = describe_death(api_pid, rc, time.time() - (self._snap.ready_at or time.time()), names, freed,
                                     after_ready(lines))
            self._snap.events.append((time.time(), mark("server died")))
            self._set(state=FAILED, stage=mark("failed"), error=msg, pid=None)
            self._pid, self._proc = None, None
            self._remove_record()

    def _give_up(self, msg: Message) -> None:
        self._stop_tree(grace_s=10)
        with self._lock:
            self._snap.events.append((time.time(), mark("start failed")))
            self._set(state=FAILED, stage=mark("failed"), error=msg, pid=None)
            self._pid, self._proc = None, None
            self._remove_record()

    def _read_log(self, pos: int) -> int:
        if not self._log_path:
            return pos
        try:
            with open(self._log_path, "rb") as f:
                f.seek(pos)
                data = f.read()
        except OSError:
            return pos
        if not data:
            return pos
        # Only consume whole lines; progress bars use \r, treat it as a line end.
        cut = max(data.rfind(b"\n"), data.rfind(b"\r"))
        if cut < 0:
            return pos
        text = data[: cut + 1].decode("utf-8", "replace").replace("\r", "\n")
        with self._lock:
            # Read the startup figures from every chunk: in an adopted server's long log they have
            # already scrolled out of the tail that _update_stage scans.
            if self._snap.kv_cache_tokens is None and (m := KV_TOKENS.search(text)):
                self._snap.kv_cache_tokens = int(m.group(1).replace(",", ""))
            if self._snap.max_concurrency is None and (m := MAX_CONCURRENCY.search(text)):
                self._snap.max_concurrency = float(m.group(2).replace(",", ""))
            self._tail.extend(l for l in text.split("\n") if l.strip())
        return pos + cut + 1

    def _update_stage(self, lines: list[str], stage_idx: int) -> int:
        text = "\n".join(lines)
        snap = self._snap
        if snap.kv_cache_tokens is None and (m := KV_TOKENS.search(text)):
            self._set(kv_cache_tokens=int(m.group(1).replace(",", "")))
        if snap.max_concurrency is None and (m := MAX_CONCURRENCY.search(text)):
            self._set(max_concurrency=float(m.group(2).replace(",", "")))
        new_idx = stage_idx
        for i, (_, pattern) in enumerate(STAGES):
            if i > new_idx and pattern.search(text):
                new_idx = i
        if new_idx > stage_idx and snap.state == STARTING:
            name = STAGES[new_idx][0]
            now = time.time()
            with self._lock:
                self._snap.stage, self._snap.stage_at = name, now
                if name in ("weights loaded", "KV cache allocated"):
                    self._snap.events.append((now, name))
        return new_idx


def _pid_alive(pid: int | None) -> bool:
    return bool(pid) and proctree.same_process(pid, None) is not None


def _cmdline(p: psutil.Process) -> list[str]:
    try:
        return p.cmdline()
    except psutil.Error:
        return []


def _cmdline_of(pid: int | None) -> list[str]:
    try:
        return psutil.Process(pid).cmdline() if pid else []
    except psutil.Error:
        return []


def _pgid(p: psutil.Process) -> int | None:
    try:
        return os.getpgid(p.pid)
    except (ProcessLookupError, PermissionError):
        return None
