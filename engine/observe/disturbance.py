"""Whether a run was measured on a disturbed machine, and the one sentence that says so next to
its numbers. Over the measured part (`Watch`): the CPU other programs used (`CpuWatch`: the machine's busy time from
/proc/stat less the run's own processes' — the client's process with its children and the server's tree — from
psutil) and the CPU time the hypervisor took (steal); the other processes on the run's GPUs (`GpuWatch`: NVML's
compute processes, their memory and their share of the GPU's time); from the server's own served count, the
requests another client sent it meanwhile (`record`); from the chat desk, the chat answers streamed beside it
(Notes.beside.chats). Two readings, one at each end of the measured part: nothing runs beside the
measurement. Kept in Notes.beside.disturbance (engine.results.records.Disturbance)."""
from __future__ import annotations

import os
import time
from collections.abc import Iterable
from typing import Any

import psutil

from engine.digits import significant
from engine.messages import Message, say, say_n
from engine.observe import nvml
from engine.results.records import Disturbance

# Disturbed: other programs used at least this share of the machine's cores (and at least MIN_CORES), the
# hypervisor took STEAL_SHARE of its CPU time, or any other request reached the server or any chat ran beside
OTHERS_SHARE = 0.1
MIN_CORES = 0.25
STEAL_SHARE = 0.05
# The kernel counts CPU time in 10 ms ticks, per process: the others' share of a short span is that coarse, so the
# threshold grows by TICK_SLACK_S over the span, and a span under MIN_SECONDS is not judged at all
TICK_SLACK_S = 0.05
MIN_SECONDS = 0.25
# Disturbed on a GPU: another process had at least this share (per cent) of the run's GPU's SM time, NVML's
# per-process samples say; where the driver gives no such samples, any other compute process there (its share
# unknown, it cannot be ruled out)
GPU_BUSY_PCT = 5.0
GIB = 1024 ** 3


def _tree_seconds(roots: Iterable[int]) -> float:
    """CPU seconds the processes under `roots` have used, with their ended children's (reaped: in their parent's
    children_* times). A process that is gone counts nothing."""
    seen: set[int] = set()
    total = 0.0
    for root in roots:
        try:
            procs = [psutil.Process(root), *psutil.Process(root).children(recursive=True)]
        except psutil.Error:
            continue
        for p in procs:
            if p.pid in seen:
                continue
            seen.add(p.pid)
            try:
                t = p.cpu_times()
            except psutil.Error:
                continue
            total += t.user + t.system + t.children_user + t.children_system
    return total


def _tree_pids(roots: Iterable[int]) -> set[int]:
    """The pids of the processes under `roots`, the roots included (one that is gone counts nothing)."""
    out: set[int] = set()
    for root in roots:
        try:
            out.update([root, *(p.pid for p in psutil.Process(root).children(recursive=True))])
        except psutil.Error:
            continue
    return out


def _machine() -> tuple[float, float]:
    """The machine's busy and stolen CPU seconds since boot, over all cores (/proc/stat)."""
    t = psutil.cpu_times()
    busy = t.user + t.nice + t.system + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0)
    return busy, getattr(t, "steal", 0.0)


class CpuWatch:
    """The CPU used beside a run's measured part: `start` when it begins, `stop` when it ends. Its own
    processes are this one (the client, with any client worker processes and the naive worker it started)
    and the trees under `servers` (the pids of the servers it measures on this machine)."""

    def __init__(self, servers: Iterable[int | None] = ()) -> None:
        self.roots = [os.getpid(), *(p for p in servers if p)]
        self._begin: tuple[float, float, float, float] | None = None

    def start(self) -> None:
        busy, steal = _machine()
        self._begin = (time.monotonic(), busy, steal, _tree_seconds(self.roots))

    def stop(self) -> Disturbance | None:
        """The CPU over the measured part (seconds, cores, others_cores, steal_cores); None when it never started."""
        if self._begin is None:
            return None
        t0, busy0, steal0, own0 = self._begin
        busy, steal = _machine()
        own = _tree_seconds(self.roots)
        seconds = time.monotonic() - t0
        if seconds <= 0:
            return None
        others = max(0.0, (busy - busy0) - (own - own0)) / seconds
        return Disturbance(seconds=round(seconds, 2), cores=psutil.cpu_count() or 1, others_cores=round(others, 2),
                           steal_cores=round(max(0.0, steal - steal0) / seconds, 2))


class GpuWatch:
    """The other processes on the run's GPUs over its measured part: NVML's compute processes at each end (their pids
    and memory) and each process's share of the GPU's SM time in between (NVML's per-process samples). A process is
    the run's own when it is in the trees under `roots` (as CpuWatch's); a GPU is the run's when one of its own
    processes computes on it. A server on another machine, or NVML's pids from another pid namespace (a container's
    host pids), leave no GPU of the run's here: nothing is judged then. `nv`: the pynvml to ask (default: this
    process's; none without a GPU, and then `stop` gives None: the CPU's reading alone)."""

    def __init__(self, roots: Iterable[int], nv: Any = None) -> None:
        self.roots, self.nv = list(roots), nv
        self._since: int | None = None
        self._begin: dict[int, dict[int, int]] = {}
        self._own: set[int] = set()

    def _procs(self) -> dict[int, dict[int, int]]:
        return {g["index"]: g["procs"] for g in nvml.devices(self.nv)}

    def start(self) -> None:
        self._since = int(time.time() * 1e6)  # NVML's sample clock: microseconds since the epoch
        self._begin, self._own = self._procs(), _tree_pids(self.roots)

    def stop(self, own: Iterable[int] = (), gpus: Iterable[int] = ()) -> dict[str, Any] | None:
        """{gpus, gpu_others, gpu_others_gb, gpu_others_busy} (Disturbance's fields): the run's GPUs, how many other
        processes computed on them, the most memory those held (GB), and the largest share of one GPU's SM time they
        had together (per cent; None where the driver does not say); None without a GPU of the run's.
        `own`: the run's processes that ended before this reading (the naive worker), so at neither end; a GPU is
        the run's too where NVML's samples over the span show one of them computing, or where it is in `gpus` (the
        GPU such a process said it used)."""
        if self._since is None:
            return None
        end = self._procs()
        own = self._own | _tree_pids(self.roots) | set(own)
        pids = {i: set(self._begin.get(i, {})) | set(end.get(i, {})) for i in set(self._begin) | set(end)}
        shares = {i: nvml.process_busy(i, self._since, self.nv) for i in pids}
        mine = sorted(i for i, on in pids.items()
                      if on & own or i in set(gpus) or set(shares[i] or {}) & own)
        if not mine:
            return None
        held: dict[tuple[int, int], int] = {}
        for i in mine:
            for procs in (self._begin.get(i, {}), end.get(i, {})):
                for pid, used in procs.items():
                    if pid not in own:
                        held[(i, pid)] = max(held.get((i, pid), 0), used)
        busy: float | None = None
        for i in mine:
            if (sampled := shares[i]) is None:
                continue
            others = {pid: share for pid, share in sampled.items() if pid not in own and share > 0}
            for pid in others:  # one that came and went between the two readings still computed beside the run
                held.setdefault((i, pid), 0)
            busy = max(busy or 0.0, sum(others.values()))
        return {"gpus": mine, "gpu_others": len({pid for _i, pid in held}),
                "gpu_others_gb": round(sum(held.values()) / GIB, 2),
                "gpu_others_busy": None if busy is None else round(busy, 1)}


class Watch:
    """What ran beside a run's measured part, read at its two ends: the CPU (CpuWatch) and the GPUs (GpuWatch) beside
    this process's tree and the servers' (`servers`); `nv` as GpuWatch's."""

    def __init__(self, servers: Iterable[int | None] = (), nv: Any = None) -> None:
        self.cpu = CpuWatch(servers)
        self.gpu = GpuWatch(self.cpu.roots, nv)

    def start(self) -> None:
        self.gpu.start()
        self.cpu.start()

    def stop(self, own: Iterable[int] = (), gpus: Iterable[int] = ()) -> Disturbance | None:
        """CpuWatch's reading with GpuWatch's (`own`, `gpus` as GpuWatch.stop takes them); None when neither read
        anything."""
        cpu, gpu = self.cpu.stop(), self.gpu.stop(own, gpus)
        if gpu is None:
            return cpu
        return (cpu or Disturbance()).model_copy(update=gpu)


def record(cpu: Disturbance | None, served_before: int | None, served_after: int | None,
           sent: int) -> Disturbance | None:
    """What Notes.beside.disturbance keeps: the Watch's reading (`cpu`), and the requests the server served from
    before the run's warm-up to its end that this run did not send (`sent`: all its requests, warm-up included);
    None when neither is known."""
    other = None
    if served_before is not None and served_after is not None and served_after >= served_before:
        other = max(0, served_after - served_before - sent)
    if cpu is None and other is None:
        return None
    return (cpu or Disturbance()).model_copy(update={"other_requests": other})


def _cpu_disturbed(d: Disturbance) -> tuple[bool, bool]:
    """(other programs used enough CPU to matter, the hypervisor took enough), beyond the ticks' coarseness."""
    if not d.seconds or d.seconds < MIN_SECONDS:
        return False, False
    cores = d.cores or 1
    others = (d.others_cores or 0) >= max(MIN_CORES, OTHERS_SHARE * cores) + TICK_SLACK_S / d.seconds
    return others, (d.steal_cores or 0) >= STEAL_SHARE * cores


def _gpu_disturbed(d: Disturbance) -> bool:
    """Another process computed on the run's GPU: with a share of its time NVML measured, or one it cannot say."""
    if not d.gpu_others:
        return False
    return d.gpu_others_busy is None or d.gpu_others_busy >= GPU_BUSY_PCT


def disturbed(notes: Any) -> bool:
    """Whether something beside the run took from it: its numbers are not what this machine gives when quiet."""
    d = notes.beside.disturbance or Disturbance()
    return any(_cpu_disturbed(d)) or _gpu_disturbed(d) or bool(d.other_requests) or bool(notes.beside.chats)


def what(notes: Any) -> Message | None:
    """What ran beside a run, as a clause ("other programs used 1.4 of 2 cores and 2 chat answers streamed beside
    it"); None for a quiet run (or one measured before this was recorded)."""
    d = notes.beside.disturbance or Disturbance()
    others, steal = _cpu_disturbed(d)
    what: list[Message] = []
    if others:
        what.append(say("other programs used {used:.1f} of {cores} cores", used=d.others_cores, cores=d.cores))
    if steal:
        what.append(say("the hypervisor took {share:.0%} of the CPU time (steal)",
                        share=(d.steal_cores or 0) / (d.cores or 1)))
    if _gpu_disturbed(d):
        n, gb, busy = d.gpu_others or 0, significant(d.gpu_others_gb or 0), d.gpu_others_busy
        what.append(say_n("{n} other process on the GPU held {gb} GB (how busy, the driver does not say)",
                          "{n} other processes on the GPU held {gb} GB (how busy, the driver does not say)", n,
                          gb=gb) if busy is None else
                    say_n("{n} other process on the GPU held {gb} GB and used {share} of its compute time",
                          "{n} other processes on the GPU held {gb} GB and used {share} of its compute time", n,
                          gb=gb, share=f"{round(busy)} %"))
    if n := d.other_requests:
        what.append(say_n("the server answered {n} request from another client",
                          "the server answered {n} requests from another client", n))
    if n := notes.beside.chats:
        what.append(say_n("{n} chat answer streamed beside it", "{n} chat answers streamed beside it", n))
    if not what:
        return None
    listed = what[-1] if len(what) == 1 else say("{first} and {last}", first=what[-2], last=what[-1])
    for clause in reversed(what[:-2]):
        listed = say("{first}, {rest}", first=clause, rest=listed)
    return listed


def said(notes: Any) -> Message | None:
    """One sentence, e.g. "Measured while other programs used 1.4 of 2 cores: this machine can do better than
    these numbers."; None for a quiet run (or one measured before this was recorded)."""
    listed = what(notes)
    return None if listed is None else say("Measured while {what}: this machine can do better than these numbers.",
                                           what=listed)


def said_each(sides: Any) -> Message | None:
    """What disturbed several labelled sets of runs ((label, runs) each: the configurations a comparison sets side
    by side), one sentence: a single disturbed set as said_of says it, led by its label; several with each one's
    clause and count, the consequence said once (repeated per set, it made a wall of text under Tuning's chart)."""
    kept = [(label, [r for r in runs if r is not None]) for label, runs in sides]
    hit = [(label, runs, busy) for label, runs in kept
           if (busy := [w for r in runs if (w := what(r.extra)) is not None])]
    if not hit:
        return None
    if len(hit) == 1:
        label, runs, _busy = hit[0]
        return say("{side}: {sentence}", side=label, sentence=said_of(runs))
    each = [say("{side} was measured while {what} ({k} of {n} runs)", side=label, k=len(busy), n=len(runs),
                what=busy[0]) if len(runs) > 1 else say("{side} was measured while {what}", side=label, what=busy[0])
            for label, runs, busy in hit]
    listed = each[-1]
    for clause in reversed(each[:-1]):
        listed = say("{first}; {rest}", first=clause, rest=listed)
    return say("{each}. This machine can do better than these numbers.", each=listed)


def said_of(runs: list) -> Message | None:
    """One sentence for a set of runs (a step's repeats): the first disturbed one's, with how many were."""
    hit = [s for r in runs if r is not None and (s := said(r.extra)) is not None]
    if not hit:
        return None
    return hit[0] if len(runs) == 1 else say("{sentence} ({k} of {n} runs.)", k=len(hit), n=len(runs),
                                                       sentence=hit[0])
