"""The processes of one vLLM server, found and stopped as a whole.
See docs/internals.md#proctree."""
from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass

import psutil

from engine.messages import Message, say
from engine.observe import nvml
from engine.observe.telemetry import resident_bytes

TAG_ENV = "SERVING_LAB_SERVER"


@dataclass(frozen=True)
class Tag:
    home: str  # the runtime folder of the app that started it (tests and apps beside each other stay apart)
    port: int
    start_id: str

    def __str__(self) -> str:
        return f"{self.home}|{self.port}|{self.start_id}"

    @staticmethod
    def parse(text: str | None) -> "Tag | None":
        try:
            home, port, start_id = (text or "").rsplit("|", 2)
            return Tag(home, int(port), start_id)
        except ValueError:
            return None


def tagged(home: str, port: int | None = None) -> list[tuple[psutil.Process, Tag]]:
    """Live processes that carry a tag of this app (runtime folder `home`), optionally of one port.
    Processes whose environment we may not read (other users') are not ours."""
    out = []
    for p in psutil.process_iter():
        try:
            tag = Tag.parse(p.environ().get(TAG_ENV))
            if tag and tag.home == home and (port is None or tag.port == port) and alive(p):
                out.append((p, tag))
        except psutil.Error:
            continue
    return out


def session(sid: int) -> list[psutil.Process]:
    """Live processes of session `sid`. The API server starts its own session and every child stays in
    it, the renamed ones too (vLLM's setproctitle overwrites what /proc shows of their environment, so
    EngineCore and the workers cannot be found by their tag). The kernel keeps a session's id from
    being reused while any member lives, so when its leader is gone the members are still ours."""
    out = []
    for p in psutil.process_iter():
        try:
            if os.getsid(p.pid) == sid and alive(p):
                out.append(p)
        except (OSError, psutil.Error):
            continue
    return out


def alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def since_boot(p: psutil.Process) -> float:
    """When `p` started, in seconds after boot, as the kernel counts it (/proc/PID/stat's start time, in clock ticks;
    psutil tells processes apart by the same): with its pid, what tells a process from a later one that got the pid
    recycled. Never the wall clock: psutil's create_time() adds the boot time the wall clock gives, which moves when
    the clock is stepped (NTP on a freshly booted machine), so two readings of one process could disagree."""
    try:
        with open(f"/proc/{p.pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        raise psutil.NoSuchProcess(p.pid) from None
    return int(stat[stat.rindex(b")") + 2:].split()[19]) / os.sysconf("SC_CLK_TCK")


def exec_done(pid: int, timeout_s: float = 60.0) -> None:
    """Wait until the kernel shows `pid`'s new command line and environment. Popen returns once exec has begun, and
    on a loaded machine /proc/PID/cmdline and environ read empty for a while after (measured: 180 of 300 launches
    beside six busy loops): a second app reading the port's record then would not see an API server, nor our tag,
    and launch another. Returns as soon as both show (milliseconds, even loaded), or when the process is gone; the
    bound is generous because the port's lock is held meanwhile and a start takes a minute anyway."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as c, open(f"/proc/{pid}/environ", "rb") as e:
                if c.read(1) and e.read(1):
                    return
            if not alive(psutil.Process(pid)):  # exited (a zombie reads empty too)
                return
        except (OSError, psutil.Error):
            return
        time.sleep(0.005)


def same_process(pid: int, started: float | None) -> psutil.Process | None:
    """The process `pid` if it is still the one that started `started` seconds after boot (not a recycled
    pid); any live process with that pid when `started` is None."""
    try:
        p = psutil.Process(pid)
        if started is not None and abs(since_boot(p) - started) > 0.05:
            return None
        return p if alive(p) else None
    except psutil.Error:
        return None


def family(pid: int) -> list[psutil.Process]:
    """A process and all its descendants, as far as they are still its descendants."""
    try:
        p = psutil.Process(pid)
        return [p, *p.children(recursive=True)]
    except psutil.Error:
        return []


def name(p: psutil.Process) -> str:
    """How a person recognises it: vLLM renames its children (VLLM::EngineCore, VLLM::Worker...)."""
    try:
        return f"{p.name()} (pid {p.pid})"
    except psutil.Error:
        return f"pid {p.pid}"


def held(procs: list[psutil.Process]) -> Message:
    """The memory these processes hold, in words: RAM, and GPU memory where NVML lists them."""
    ram = resident_bytes(procs)
    pids = {p.pid for p in procs}
    gpu = sum(used for g in nvml.devices() for pid, used in g["procs"].items() if pid in pids)
    if gpu:
        return say("{ram} of RAM and {gpu} of GPU memory", ram=gb(ram), gpu=gb(gpu))
    return say("{ram} of RAM", ram=gb(ram))


def gb(n: int) -> str:
    return f"{n / 1024**3:.1f} GB" if n >= 1024**3 / 10 else f"{n / 1024**2:.0f} MB"


def stop(procs: list[psutil.Process], grace_s: float = 20.0, group: int | None = None) -> None:
    """SIGTERM `procs` (and the process group `group`, which catches a child born meanwhile), then
    SIGKILL whatever is left after the grace period. Returns when they are gone."""
    procs = [p for p in procs if alive(p)]
    _signal(procs, group, signal.SIGTERM)
    _, left = psutil.wait_procs(procs, timeout=grace_s)
    _signal(left, group, signal.SIGKILL)
    psutil.wait_procs(left, timeout=5)


def _signal(procs: list[psutil.Process], group: int | None, sig: int) -> None:
    if group is not None:
        try:
            os.killpg(group, sig)
        except (ProcessLookupError, PermissionError):
            pass
    for p in procs:
        try:
            p.send_signal(sig)
        except psutil.Error:
            pass


def cmdline(p: psutil.Process) -> list[str]:
    try:
        return p.cmdline()
    except psutil.Error:
        return []


def listens(p: psutil.Process, port: int) -> bool:
    """Whether `p` listens on `port`: a server answering there, never a leftover to stop on its own (a dead
    server's workers listen elsewhere, torch's TCP store, and are leftovers)."""
    try:
        return any(c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port
                   for c in p.net_connections(kind="inet"))
    except psutil.Error:
        return False


def sid(p: psutil.Process) -> int | None:
    try:
        return os.getsid(p.pid)
    except OSError:
        return None


def pgid(p: psutil.Process) -> int | None:
    try:
        return os.getpgid(p.pid)
    except (ProcessLookupError, PermissionError):
        return None


def pid_alive(pid: int | None) -> bool:
    return pid is not None and pid != 0 and same_process(pid, None) is not None
