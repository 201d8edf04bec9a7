"""VLLMServer: owns one vLLM API server process — start, startup stages read from its log, health,
stop (really stopped), and adoption after the app itself was killed and restarted.

The process runs in its own session (process group), so stop() can signal vLLM's engine-core and
worker children too. What was started is recorded on disk (runtime_dir()/server-<port>.json); a
new VLLMServer on the same port adopts a live server it finds there, or cleans up after a dead one.
A foreign process on the port is reported, never killed.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import httpx
import psutil

from .config import API_SERVER_MODULE, ServerConfig, port_is_free
from .errors import PortInUse, ServerBusy, ServerFailed
from .paths import runtime_dir

STOPPED, STARTING, READY, STOPPING, FAILED = "stopped", "starting", "ready", "stopping", "failed"

# Startup stages, in order, recognised from vLLM's log lines (GPU and CPU builds, 0.2x-0.3x).
STAGES: tuple[tuple[str, re.Pattern], ...] = (
    ("launching", re.compile(r"vLLM API server version|non-default args")),
    ("resolving model", re.compile(r"Resolved architecture|Using max model len")),
    ("starting engine", re.compile(r"Initializing a V1 LLM engine|Initializing an LLM engine")),
    ("loading weights", re.compile(r"Starting to load model|Loading safetensors|Loading weights")),
    ("weights loaded", re.compile(r"Loading weights took|Model loading took")),
    ("compiling", re.compile(r"torch\.compile|Compiling a graph|Warming up model|Dynamo bytecode")),
    ("KV cache allocated", re.compile(r"KV cache size:|Maximum concurrency for")),
    ("capturing graphs", re.compile(r"Capturing CUDA graph|Capturing cudagraph|Graph capturing")),
    ("starting HTTP server", re.compile(r"Starting vLLM API server|Available routes|Started server process")),
    ("serving", re.compile(r"Application startup complete")),
)
KV_TOKENS = re.compile(r"KV cache size:\s*([\d,]+)\s*tokens")
MAX_CONCURRENCY = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request:\s*([\d.,]+)x")

# Known causes of a failed start, in plain words (pattern in the log -> sentence).
CAUSES: tuple[tuple[re.Pattern, str], ...] = (
    (re.compile(r"CUDA out of memory|OutOfMemoryError|out of memory", re.I),
     "The GPU ran out of memory while starting: lower max-model-len or gpu-memory-utilization, or free the GPU "
     "(e.g. stop the naive baseline) and start again."),
    (re.compile(r"No available memory for the cache blocks|Insufficient memory|KV cache is needed, which is larger than the available", re.I),
     "There is not enough memory left for the KV cache at these settings: raise gpu-memory-utilization (or the "
     "CPU KV cache size), or lower max-model-len."),
    (re.compile(r"larger than the maximum number of tokens that can be stored in KV cache|max_model_len.*is larger than|exceeds the maximum", re.I),
     "max-model-len does not fit in the KV cache at these settings: lower max-model-len or give vLLM more memory."),
    (re.compile(r"greater than the derived max_model_len|User-specified max_model_len", re.I),
     "max-model-len is above what this model supports: lower it to the model's context length."),
    (re.compile(r"Free memory on device .* is less than desired GPU memory utilization", re.I),
     "Another process already holds GPU memory, so the requested gpu-memory-utilization is not available: lower "
     "it or free the GPU, then start again."),
    (re.compile(r"validation error for \w+\s*\n\s*(?:Value error, )?(.*?)\s*\[type="),
     "vLLM rejected the settings ({0}): change that setting and start again."),
    (re.compile(r"unrecognized arguments:\s*(.*)"),
     "vLLM did not recognise a flag ({0}): remove it or check its spelling."),
    (re.compile(r"error: argument (.*)"),
     "vLLM rejected a flag ({0}): fix its value and start again."),
    (re.compile(r"Address already in use"),
     "The port is already in use by another program: pick another port."),
    (re.compile(r"(?:does not appear to have a file named|is not a local folder|Repository Not Found|couldn't connect to)", re.I),
     "vLLM could not find the model: check the folder or hub id (a hub id needs a network)."),
)


def describe_failure(log_lines: list[str], returncode: int | None) -> str:
    """One sentence for why a start failed, from the last lines of the log."""
    text = "\n".join(log_lines[-200:])
    for pattern, sentence in CAUSES:
        m = pattern.search(text)
        if m:
            return sentence.format(*(g.strip()[:120] for g in m.groups()))
    errors = [l.strip() for l in log_lines if re.search(r"(Error|Exception|error:)", l)]
    last = errors[-1][-200:] if errors else (log_lines[-1].strip()[-200:] if log_lines else "no output")
    return f"vLLM exited (code {returncode}) before it was ready: {last}. See the log below for details."


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

    @property
    def elapsed(self) -> float | None:
        if self.started_at is None:
            return None
        return (self.ready_at or time.time()) - self.started_at


class VLLMServer:
    """One vLLM server on one port. Thread-safe; every public method returns quickly."""

    def __init__(self, port: int = 9000, python: str | None = None, poll_s: float = 0.5):
        self.port = port
        self.python = python
        self.poll_s = poll_s
        self._lock = threading.RLock()
        self._proc: subprocess.Popen | None = None
        self._pid: int | None = None
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
        """Validate, check the port, launch. Returns at once; watch snapshot() for stages."""
        if cfg.port != self.port:
            cfg = cfg.with_changes(port=self.port)
        cfg.validate(model_max_len=model_max_len, known_flags=known_flags)
        with self._lock:
            if self._snap.state in (STARTING, READY, STOPPING):
                raise ServerBusy(f"A vLLM server is already {self._snap.state} on port {self.port}: stop it first, or use Restart.")
            if not port_is_free(cfg.port, cfg.host):
                raise PortInUse(self._port_owner_sentence(cfg.port))
            self._log_path = runtime_dir() / f"server-{self.port}.log"
            log = open(self._log_path, "wb")
            env = {**os.environ, **cfg.env(), "PYTHONUNBUFFERED": "1"}
            argv = cfg.argv(self.python)
            now = time.time()
            self._proc = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=env, start_new_session=True,
            )
            log.close()
            self._pid = self._proc.pid
            self._tail.clear()
            self._snap = Snapshot(
                state=STARTING, stage="launching", started_at=now, stage_at=now, pid=self._pid, config=cfg,
                command=cfg.shell_command(), events=[(now, "server start")],
            )
            self._write_record(cfg, argv, now)
            self._spawn_watcher()

    def stop(self, grace_s: float = 20.0) -> None:
        """SIGTERM to the whole process group, SIGKILL after the grace period. Blocks until gone."""
        with self._lock:
            pid = self._pid
            if pid is None:
                self._set(state=STOPPED, stage="")
                self._remove_record()
                return
            self._set(state=STOPPING, stage="stopping")
        self._stop_watch.set()
        _terminate_tree(pid, grace_s)
        if self._proc is not None:
            try:
                self._proc.wait(timeout=1)
            except subprocess.TimeoutExpired:
                pass
        with self._lock:
            self._proc, self._pid = None, None
            self._remove_record()
            snap = self._snap
            self._snap = Snapshot(
                state=STOPPED, config=snap.config, command=snap.command,
                events=snap.events + [(time.time(), "server stop")],
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
                raise ServerFailed(s.error or "The server stopped before it was ready.")
            time.sleep(0.2)
        raise ServerFailed(f"The server was not ready after {timeout_s:.0f} s: see its log, or stop it and try smaller settings.")

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

    # -- adoption -----------------------------------------------------------------------------
    def adopt_or_clean(self) -> None:
        """Find a server this app started before it was killed: adopt it if alive, else forget it."""
        try:
            rec = json.loads(self.record_path.read_text())
        except (OSError, ValueError):
            return
        pid = rec.get("pid")
        if pid and _is_our_server(pid, rec.get("create_time")):
            cfg = ServerConfig.from_dict(rec["config"])
            self._pid = pid
            self._log_path = Path(rec["log"])
            started = rec.get("started_at", time.time())
            self._snap = Snapshot(
                state=STARTING, stage="adopting", started_at=started, stage_at=time.time(), pid=pid,
                config=cfg, command=cfg.shell_command(), adopted=True,
                events=[(started, "server start"), (time.time(), "adopted after app restart")],
            )
            if self.health(timeout=1.0):  # a healthy orphan is ready at once, not after the first poll
                now = time.time()
                self._set(state=READY, stage="serving", ready_at=now, stage_at=now)
            self._spawn_watcher()
        else:
            self._remove_record()

    # -- internals ----------------------------------------------------------------------------
    def _set(self, **kw) -> None:
        with self._lock:
            for k, v in kw.items():
                setattr(self._snap, k, v)

    def _write_record(self, cfg: ServerConfig, argv: list[str], started_at: float) -> None:
        rec = {
            "pid": self._pid, "create_time": psutil.Process(self._pid).create_time(),
            "port": self.port, "argv": argv, "config": cfg.to_dict() | {"api_key": cfg.api_key},
            "started_at": started_at, "log": str(self._log_path),
        }
        tmp = self.record_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(rec, indent=2))
        os.chmod(tmp, 0o600)  # may hold the API key
        tmp.replace(self.record_path)

    def _remove_record(self) -> None:
        try:
            self.record_path.unlink()
        except FileNotFoundError:
            pass

    def _port_owner_sentence(self, port: int) -> str:
        for c in psutil.net_connections(kind="inet"):
            if c.laddr and c.laddr.port == port and c.status == psutil.CONN_LISTEN and c.pid:
                try:
                    name = psutil.Process(c.pid).name()
                except psutil.Error:
                    name = "unknown"
                return (f"Port {port} is already in use by another program ({name}, pid {c.pid}); it was left alone: "
                        "stop that program or pick another port.")
        return f"Port {port} is already in use by another program: stop it or pick another port."

    def _spawn_watcher(self) -> None:
        self._stop_watch = threading.Event()
        self._watcher = threading.Thread(target=self._watch, args=(self._stop_watch,), daemon=True, name=f"vllm-watch-{self.port}")
        self._watcher.start()

    def _watch(self, stop: threading.Event) -> None:
        """Follow the log for stages, poll /health until ready, notice the process dying."""
        pos = 0
        stage_idx = -1
        while not stop.is_set():
            pos = self._read_log(pos)
            with self._lock:
                lines = list(self._tail)
            stage_idx = self._update_stage(lines, stage_idx)
            alive = _pid_alive(self._pid)
            state = self._snap.state
            if not alive and state in (STARTING, READY):
                rc = self._proc.poll() if self._proc else None
                self._read_log(pos)
                with self._lock:
                    lines = list(self._tail)
                    msg = describe_failure(lines, rc) if state == STARTING else (
                        f"The vLLM server stopped unexpectedly (code {rc}): {describe_failure(lines, rc)}")
                    self._snap.events.append((time.time(), "server died"))
                    self._set(state=FAILED, stage="failed", error=msg, pid=None)
                    self._pid, self._proc = None, None
                    self._remove_record()
                return
            if state == STARTING and self.health(timeout=1.0):
                now = time.time()
                with self._lock:
                    self._snap.events.append((now, "ready"))
                    self._set(state=READY, stage="serving", ready_at=now, stage_at=now)
            stop.wait(self.poll_s)

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
    if not pid:
        return False
    try:
        p = psutil.Process(pid)
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _is_our_server(pid: int, create_time: float | None) -> bool:
    """The recorded pid is still the vLLM we started (not a recycled pid)."""
    try:
        p = psutil.Process(pid)
        if create_time is not None and abs(p.create_time() - create_time) > 1.0:
            return False
        return API_SERVER_MODULE in " ".join(p.cmdline()) and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _terminate_tree(pid: int, grace_s: float) -> None:
    """SIGTERM the process group (and any child that left it), then SIGKILL what is left."""
    try:
        procs = [psutil.Process(pid)]
        procs += procs[0].children(recursive=True)
    except psutil.Error:
        procs = []
    try:
        os.killpg(pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        pass
    for p in procs:
        try:
            p.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    if alive:
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        for p in alive:
            try:
                p.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(alive, timeout=5)
