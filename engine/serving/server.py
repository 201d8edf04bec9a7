"""VLLMServer: one vLLM server and its whole process tree on one port: start, health, stop, adoption.
See docs/internals.md#server."""
from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import httpx
import psutil

from engine import paths
from engine.errors import LeftoversHold, PortInUse, ServerBusy, ServerFailed
from engine.messages import Message, mark, say, say_n
from engine.serving import proctree
from engine.serving.config import ServerConfig
from engine.serving.leftovers import home, leftovers, leftovers_sentence, port_lock
from engine.serving.port_record import PortRecord, command, holder_said, starter_said
from engine.settings import Settings
from engine.serving.vllm_log import LogFollower, after_ready, ago, describe_death, describe_failure

from engine.serving.states import FAILED, READY, STARTING, STOPPED, STOPPING  # noqa: F401 (also read from here)

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
    started_by: str | None = None  # an adopted server's starter, in words (starter_said)
    notice: str | None = None  # what the app cleaned up on its own, or who started the server it follows

    @property
    def elapsed(self) -> float | None:
        if self.started_at is None:
            return None
        return (self.ready_at or time.time()) - self.started_at


MAX_EVENTS = 200  # lifecycle and benchmark markers kept across restarts


class VLLMServer:
    """One vLLM server on one port, and every process of its tree. Thread-safe; every public method
    but stop() returns quickly."""

    def __init__(self, settings: Settings, port: int = 9000, python: str | None = None, poll_s: float = 0.5,
                 start_timeout_s: float | None = None, serving_grace_s: float = 30.0, starter: str = "app",
                 clean: bool = True):
        self.port = port
        # where its record, lock and log live: the settings of its Lab (or command)
        self.settings = settings
        self.runtime = paths.runtime_dir(self.settings)
        # who starts servers through this object ("app" or "cli"): written in the record, so whoever
        # finds the server later can say who started it
        self.starter = starter
        self.python = python
        self.poll_s = poll_s
        # A start that never reaches "serving" ends as failed (CPU compile ~100 s, 8B on a GPU ~2 min).
        self.start_timeout_s = start_timeout_s or self.settings.start_timeout_s
        # vLLM says it serves but nothing answers on our port (a --port smuggled in): failed after this.
        self.serving_grace_s = serving_grace_s
        self._lock = threading.RLock()
        self._proc: subprocess.Popen | None = None
        self._pid: int | None = None
        self._tag: proctree.Tag | None = None
        self._family: dict[int, float] = {}  # descendants seen so far: pid -> create time
        self._snap = Snapshot(state=STOPPED)
        self._log = LogFollower()
        self._watcher: threading.Thread | None = None
        self._stop_watch = threading.Event()
        self._record_seen: int | None = None  # the record's mtime when last looked at (follow())
        self._starter: dict = {}  # who started the server this object follows (the record's "starter")
        self._argv: list[str] = []
        self._record = PortRecord(self.runtime, port)
        self.adopt_or_clean(clean=clean)

    # -- public --------------------------------------------------------------------------------
    @property
    def record_path(self) -> Path:
        return self._record.path

    def record(self) -> dict | None:
        """The record of the live server this object follows (whoever started it), else None."""
        with self._lock, port_lock(self.runtime, self.port):
            return self._record.live() if self._pid is not None else None

    def snapshot(self) -> Snapshot:
        self.follow()
        with self._lock:
            s = self._snap
            return Snapshot(**{**s.__dict__, "log_tail": self._log.lines(60), "events": list(s.events)})

    def start(self, cfg: ServerConfig, model_max_len: int | None = None, known_flags: set[str] | None = None,
              adopt: bool = False) -> None:
        """Validate, check the port and leftovers, launch. Returns at once; watch snapshot() for stages.
        The checks, the launch and the record happen under the port's lock, which every process of this
        app takes (a second app on the same data folder, the CLI): whoever comes second finds the first
        one's record and, with `adopt` (the app), follows that server, else (the CLI, a comparison that
        restarts with its own settings) is told in one sentence who holds the port (ServerBusy)."""
        if cfg.port != self.port:
            cfg = cfg.with_changes(port=self.port)
        cfg.validate(model_max_len=model_max_len, known_flags=known_flags)
        with self._lock, port_lock(self.runtime, self.port):
            if self._snap.state in (STARTING, READY, STOPPING):
                if self._snap.adopted:  # another process started it and this one follows it: say who
                    raise ServerBusy(say("A vLLM server is already {state} on port {port}, started by {who}: this app "
                                         "follows it; stop it first, or use Restart to apply your settings.",
                                         state=self._snap.state, port=self.port, who=starter_said(self._starter)))
                raise ServerBusy(say("A vLLM server is already {state} on port {port}: stop it first, or use Restart.",
                                     state=self._snap.state, port=self.port))
            if (rec := self._record.live()) is not None:
                if not adopt:
                    raise ServerBusy(holder_said(rec, self.port))
                self._adopt(rec, notice=say(
                    "A vLLM server on port {port} was already started by {who}, so this app follows it instead of "
                    "starting a second one; Restart applies your settings.", who=starter_said(rec.get("starter")),
                    port=self.port))
                return
            if left := leftovers(self.runtime):
                raise LeftoversHold(leftovers_sentence(left))
            if not port_is_free(cfg.port, cfg.host):
                raise PortInUse(self._port_owner_sentence(cfg.port))
            self._tag = proctree.Tag(home(self.runtime), self.port, uuid.uuid4().hex[:12])
            log_path = self.runtime / f"server-{self.port}.log"
            self._log = LogFollower(log_path)
            fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            env = {**os.environ, **cfg.env(), "PYTHONUNBUFFERED": "1", proctree.TAG_ENV: str(self._tag)}
            argv = cfg.argv(self.python)
            now = time.time()
            try:
                self._proc = subprocess.Popen(argv, stdout=fd, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                              env=env, start_new_session=True)
            finally:
                os.close(fd)
            proctree.exec_done(self._proc.pid)  # before the record: whoever reads it next must see an API server
            self._pid = self._proc.pid
            self._family = {}
            self._snap = Snapshot(
                state=STARTING, stage=mark("launching"), started_at=now, stage_at=now, pid=self._pid, config=cfg,
                # the earlier starts' markers stay (a restart within a comparison): the Monitor still names
                # the runs whose load it draws before this start
                command=cfg.shell_command(), events=[*self._snap.events[-MAX_EVENTS:], (now, mark("server start"))],
            )
            self._starter = {"kind": self.starter, "pid": os.getpid(), "command": command()}
            self._argv = argv
            self._write_record()
            self._spawn_watcher(self._pid)

    def stop(self, grace_s: float = 20.0) -> None:
        """SIGTERM to the whole tree (process group, recorded descendants, tagged processes), SIGKILL
        after the grace period. Blocks until every process is gone. A server another process of this app
        started is stopped as well (this one follows it); that process is told who stopped it."""
        self.follow(wait=True)
        with self._lock:
            if self._pid is None:
                self._set(state=STOPPED, stage="")
                self._record.remove(None)
                return
            self._set(state=STOPPING, stage=mark("stopping"))
            self._write_stopped(self._pid)
        self._stop_watch.set()
        self._stop_tree(grace_s)
        with self._lock:
            self._record.remove(self._pid)
            self._proc, self._pid = None, None
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
    def follow(self, wait: bool = False) -> None:
        """While nothing runs here: adopt the server another process of this app (a second app on the same
        data folder, the CLI) has started on this port since, so every process shows the one server.
        A stat of the record unless it changed; never waits for the port's lock (a page draws meanwhile)."""
        if self._snap.state not in (STOPPED, FAILED):
            return
        try:
            seen = self.record_path.stat().st_mtime_ns
        except OSError:
            return
        if seen == self._record_seen:
            return
        with self._lock, port_lock(self.runtime, self.port, wait=wait) as held:
            if not held:
                return  # someone is deciding this moment: look again at the next snapshot
            self._record_seen = seen
            if self._snap.state in (STOPPED, FAILED) and (rec := self._record.live()) is not None:
                self._adopt(rec)

    def adopt_or_clean(self, clean: bool = True) -> None:
        """After the app (or the CLI) was restarted: adopt the server this app started on this port if
        its API server lives; else stop whatever is left of it (`clean`; `status` only reports), and say
        so in the snapshot's notice. A process that answers on this port is never stopped here: a server,
        not a leftover (the Server page's 'Clear leftovers' and `stop` say what they stop)."""
        with self._lock, port_lock(self.runtime, self.port):
            rec = self._record.read()
            api = self._record.live()
            if api is not None:
                self._adopt(api)
            elif clean:
                self._record.remove()
            # Anything else of this app on this port is a leftover: the tree of a server whose API server
            # died, or a start interrupted before its record was written (decided under the lock: a start
            # of another process writes its record before letting go).
            keep = self._tag.start_id if self._tag else None
            found = {p.pid: p for p, tag in proctree.tagged(home(self.runtime), self.port) if tag.start_id != keep}
            if api is None and isinstance(rec.get("pid"), int):
                # The dead API server's session (its renamed children carry no readable tag), unless its pid
                # now leads someone else's session, and the descendants recorded before it died.
                if not psutil.pid_exists(rec["pid"]):
                    for p in proctree.session(rec["pid"]):
                        found.setdefault(p.pid, p)
                for pid, ct in (rec.get("family") or {}).items():
                    if p := proctree.same_process(int(pid), ct):
                        found.setdefault(p.pid, p)
        if not clean:
            return
        # a tree one of whose processes listens on this port is a server answering there, whatever its record
        serving = {proctree.sid(p) for p in found.values() if proctree.listens(p, self.port)} - {None}
        if left := [p for p in found.values() if proctree.sid(p) not in serving]:
            names, freed = [proctree.name(p) for p in left], proctree.held(left)
            proctree.stop(left, grace_s=10)
            with self._lock:
                self._snap.notice = say_n(
                    "A vLLM server this app started on port {port} had lost its API server; its {n} leftover "
                    "process ({names}) was stopped and {freed} returned.",
                    "A vLLM server this app started on port {port} had lost its API server; its {n} leftover "
                    "processes ({names}) were stopped and {freed} returned.",
                    len(left), port=self.port, names=", ".join(names), freed=freed)

    def _adopt(self, rec: dict, notice: str | None = None) -> None:
        cfg = ServerConfig.from_dict(rec["config"])
        self._pid = rec["pid"]
        self._tag = proctree.Tag.parse(rec.get("tag"))
        self._family = {int(k): v for k, v in (rec.get("family") or {}).items()}
        self._log = LogFollower(Path(rec["log"]))
        self._starter = rec.get("starter") or {}
        self._argv = rec.get("argv") or []
        # Ages from the API server's own start (psutil: the kernel's), not from this adoption.
        try:
            started = psutil.Process(self._pid).create_time()
        except psutil.Error:
            started = rec.get("started_at", time.time())
        now = time.time()
        self._snap = Snapshot(
            state=STARTING, stage=mark("adopting"), started_at=started, stage_at=now, pid=self._pid,
            config=cfg, command=cfg.shell_command(), adopted=True, notice=notice,
            started_by=say("This server was started by {who}; the app found it running and took it over.",
                           who=starter_said(self._starter)),
            events=[*self._snap.events[-MAX_EVENTS:], (started, mark("server start")),
                    (now, mark("adopted after app restart"))],
        )
        if self.health(timeout=1.0):  # a healthy orphan is ready at once, not after the first poll
            # ready since its record says (written when it became ready), else since its start
            self._set(state=READY, stage=mark("serving"), ready_at=rec.get("ready_at") or started, stage_at=now)
        self._spawn_watcher(self._pid)

    # -- internals ----------------------------------------------------------------------------
    def _set(self, **kw) -> None:
        with self._lock:
            for k, v in kw.items():
                setattr(self._snap, k, v)

    def _write_record(self) -> None:
        """What a restarted app (or another process of it) needs to adopt or clean up this server, and who
        started it. Holds the API key (the app must keep talking to an adopted server), so it is created
        0600, never world-readable for a moment. Called under the port's lock, or by the watcher of the
        server the record already names (a new descendant, the moment it became ready)."""
        snap, cfg = self._snap, self._snap.config
        assert cfg is not None and self._pid is not None
        rec = {
            "pid": self._pid, "since_boot": proctree.since_boot(psutil.Process(self._pid)), "tag": str(self._tag),
            "port": self.port, "argv": self._argv, "config": cfg.to_dict() | {"api_key": cfg.api_key},
            "started_at": snap.started_at, "ready_at": snap.ready_at, "log": str(self._log.path),
            "family": self._family, "starter": self._starter,
        }
        self._record.write(rec)

    def _write_stopped(self, pid: int) -> None:
        """Before stopping the tree of the API server `pid`: who stops it, so another process following it says
        'stopped by', not 'died'."""
        try:
            since = proctree.since_boot(psutil.Process(pid))
        except psutil.Error:
            return
        self._record.write_stopped(pid, since, {"kind": self.starter, "pid": os.getpid(), "command": command()})

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
        group = self._pid if any(proctree.pgid(p) == self._pid for p in procs) else None
        proctree.stop(procs, grace_s, group=group)
        if self._proc is not None:
            try:
                self._proc.wait(timeout=1)
            except subprocess.TimeoutExpired:
                pass
        return names, freed

    def _track_family(self, pid: int) -> None:
        """Record the API server `pid`'s descendants as they appear, so they can be found after it is gone."""
        new = [p for p in proctree.family(pid)[1:] if p.pid not in self._family]
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
            self._write_record()

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

    def _spawn_watcher(self, pid: int) -> None:
        self._stop_watch = threading.Event()
        self._watcher = threading.Thread(target=self._watch, args=(self._stop_watch, pid), daemon=True,
                                         name=f"vllm-watch-{self.port}")
        self._watcher.start()

    def _watch(self, stop: threading.Event, pid: int) -> None:
        """Follow the log for stages, poll /health until ready, record new descendants, and notice the
        API server `pid` dying (then stop the rest of its tree), a start past its deadline, or a server that
        says it serves where the app cannot reach it. The pid is the watcher's own: the server's is cleared
        when it stops, and psutil.Process(None) would be this app's process."""
        silent_since: float | None = None
        try:
            api_since = proctree.since_boot(psutil.Process(pid))
        except psutil.Error:
            api_since = None
        while not stop.is_set():
            if self._log.read():
                self._log_read()
            state = self._snap.state
            if not proctree.pid_alive(pid):
                if state in (STARTING, READY):
                    self._log.read()
                    if (by := self._record.stopped_by(pid, api_since)) is not None:
                        self._stopped_elsewhere(by)
                    else:
                        self._died(state, pid)
                return
            self._track_family(pid)
            if state == STARTING:
                if self.health(timeout=1.0):
                    now = time.time()
                    with self._lock:
                        self._snap.events.append((now, mark("ready")))
                        self._set(state=READY, stage=mark("serving"), ready_at=now, stage_at=now)
                        if not self._snap.adopted:  # when it became ready, for whoever adopts it later
                            self._write_record()
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

    def _died(self, state: str, api_pid: int) -> None:
        """The API server `api_pid` is gone: stop the rest of its tree and say what happened in one sentence."""
        rc = None
        if self._proc is not None:
            try:  # the leader of a killed multi-threaded process shows as a zombie before it can be reaped
                rc = self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        died_at = time.time()
        t0 = time.monotonic()
        names, freed = self._stop_tree(grace_s=10)
        took = time.monotonic() - t0  # what "stopped" took, measured: the sentence says it
        with self._lock:
            lines = self._log.lines()
            if state == STARTING:
                msg = describe_failure(lines, rc)
            else:
                msg = describe_death(api_pid, rc, died_at - (self._snap.ready_at or died_at), names, freed,
                                     after_ready(lines), took_s=took)
            self._snap.events.append((time.time(), mark("server died")))
            self._set(state=FAILED, stage=mark("failed"), error=msg, pid=None)
            self._record.remove(self._pid)
            self._pid, self._proc = None, None

    def _stopped_elsewhere(self, by: dict) -> None:
        """Another process of this app stopped the server this one followed: it stops the tree and removes
        the record; here the page says who, instead of a death."""
        with self._lock:
            snap = self._snap
            self._pid, self._proc = None, None
            self._snap = Snapshot(
                state=STOPPED, config=snap.config, command=snap.command,
                events=snap.events + [(time.time(), mark("server stop"))],
                notice=say("This server was stopped by {who}.", who=starter_said(by)),
            )

    def _give_up(self, msg: Message) -> None:
        self._stop_tree(grace_s=10)
        with self._lock:
            self._snap.events.append((time.time(), mark("start failed")))
            self._set(state=FAILED, stage=mark("failed"), error=msg, pid=None)
            self._record.remove(self._pid)
            self._pid, self._proc = None, None

    def _log_read(self) -> None:
        """What the log said: the KV cache's figures, and a further stage while the server starts."""
        with self._lock:
            snap = self._snap
            snap.kv_cache_tokens = snap.kv_cache_tokens or self._log.kv_cache_tokens
            snap.max_concurrency = snap.max_concurrency or self._log.max_concurrency
            if (stage := self._log.stage) and snap.state == STARTING and stage != snap.stage:
                snap.stage, snap.stage_at = stage, time.time()
                if stage in ("weights loaded", "KV cache allocated"):
                    snap.events.append((snap.stage_at, stage))


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1" if host in ("0.0.0.0", "") else host, port))
        except OSError:
            return False
    return True
