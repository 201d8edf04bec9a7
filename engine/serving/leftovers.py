"""Processes of this app's servers that outlived them, and processes of others that hold the memory
vLLM needs: found (by tag, session and the records in the runtime folder), stopped when they are ours,
only named when they are not. See engine/serving/proctree.py and docs/architecture.md."""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from pathlib import Path
from typing import Callable

import psutil

from engine.messages import Message, say, say_n
from engine.observe import nvml
from engine.serving import proctree
from engine.serving.config import API_SERVER_MODULE


def home(runtime: Path) -> str:
    """The runtime folder as the tag of every server process started from it names it."""
    return str(runtime.resolve())


@contextlib.contextmanager
def port_lock(runtime: Path, port: int, wait: bool = True):
    """The lock every process of this app (the app, a second app on the same data folder, the CLI) takes
    to decide about the server on `port`: check the record, launch, write the record; or tell leftovers
    from a server being started. An OS lock (flock) on a file in the runtime folder, so it is released
    when its holder dies, however it dies. Yields False, holding nothing, when `wait` is False and
    another holds it."""
    fd = os.open(runtime / f"server-{port}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def live_start_ids(runtime: Path) -> set[str]:
    """Start ids of the servers this app's records say are alive (on any port)."""
    ids = set()
    for path in runtime.glob("server-*.json"):
        try:
            rec = json.loads(path.read_text())
            if proctree.same_process(rec["pid"], rec.get("since_boot", -1.0)) and (
                    tag := proctree.Tag.parse(rec.get("tag"))) is not None:
                ids.add(tag.start_id)
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
    return ids


def leftovers(runtime: Path) -> list[psutil.Process]:
    """Processes of a server this app started whose API server is gone (on any port)."""
    return [p for p, _ in _leftover_tags(runtime)]


def leftovers_said(runtime: Path) -> Message | None:
    """The sentence about an earlier server's processes still holding memory, if there are any."""
    left = leftovers(runtime)
    return leftovers_sentence(left) if left else None


def _leftover_tags(runtime: Path) -> list[tuple[psutil.Process, proctree.Tag]]:
    live = live_start_ids(runtime)
    return [(p, tag) for p, tag in proctree.tagged(home(runtime)) if tag.start_id not in live]


def clear_leftovers(runtime: Path) -> Message | None:
    """Stop this app's leftovers; the sentence saying what was stopped, or None when there were none.
    Decided under the locks of their ports: a server another process is launching this moment (tagged,
    its record not yet written) is not a leftover."""
    ports = sorted({tag.port for p, tag in _leftover_tags(runtime)})
    with contextlib.ExitStack() as locks:
        for port in ports:  # in order: two cleaners never wait on each other
            locks.enter_context(port_lock(runtime, port))
        left = leftovers(runtime)
    if not left:
        return None
    sentence = say_n("Stopped {n} leftover process of an earlier server ({names}); {freed} returned.",
                     "Stopped {n} leftover processes of an earlier server ({names}); {freed} returned.",
                     len(left), names=", ".join(proctree.name(p) for p in left), freed=proctree.held(left))
    proctree.stop(left, grace_s=10)
    return sentence


def on_other_ports(runtime: Path, port: int) -> Message | None:
    """One sentence naming the API servers this app started on ports other than `port` that still run
    (`python -m engine serve --port P --detach`): the app manages one port, so it neither adopts nor
    counts them as foreign, and would otherwise say nothing of them. None when there are none."""
    ports = sorted({tag.port for p, tag in proctree.tagged(home(runtime)) if tag.port != port
                    and API_SERVER_MODULE in " ".join(proctree.cmdline(p))})
    if not ports:
        return None
    return say("A server this app started is still running on port {ports}, not this page's {port}: to measure it, "
               "connect to http://127.0.0.1:{first} above; to stop it, run: python -m engine stop --port {first}",
               ports=", ".join(map(str, ports)), port=port, first=ports[0])


def foreign_holders(runtime: Path) -> Message | None:
    """One sentence naming processes this app did not start that hold GPU memory, or (on the CPU path)
    are vLLM servers eating RAM; they are never touched. None when there are none."""
    mine = {p.pid for p, _ in proctree.tagged(home(runtime))}
    held: dict[int, tuple[psutil.Process, Message]] = {}
    for gpu in nvml.devices():
        for pid, used in gpu["procs"].items():
            if pid not in mine and (p := proctree.same_process(pid, None)):
                held[pid] = (p, say("{amount} on GPU {index}", amount=proctree.gb(used), index=gpu["index"]))
    if not nvml.available():
        for p in psutil.process_iter():
            try:
                if p.pid in mine or p.pid == os.getpid():
                    continue
                if p.name().startswith("VLLM") or API_SERVER_MODULE in " ".join(p.cmdline()):
                    held[p.pid] = (p, say("{amount} of RAM", amount=proctree.gb(p.memory_info().rss)))
            except psutil.Error:
                continue
    if not held:
        return None
    named = _listed([say("{process} with {memory}", process=proctree.name(p), memory=where)
                     for p, where in list(held.values())[:5]])
    return say("Processes this app did not start hold memory and were left alone: {named}. If they are yours and "
               "idle, stop them (kill PID) before starting; otherwise lower the memory settings.", named=named)


class Every:
    """A look-up made at most every `seconds`, its answer shared meanwhile: every viewer's Server page asks
    (others' memory holders, this app's servers on other ports)."""

    def __init__(self, look: Callable[[], Message | None], seconds: float = 5.0) -> None:
        self._look, self._seconds = look, seconds
        self._seen: tuple[float, Message | None] = (-1e9, None)  # one tuple: a reader never sees half an update

    def __call__(self) -> Message | None:
        now = time.monotonic()
        if now - self._seen[0] > self._seconds:
            self._seen = (now, self._look())
        return self._seen[1]


def leftovers_sentence(left: list[psutil.Process]) -> Message:
    return say_n("{n} process left by an earlier server of this app ({names}) still hold {held}: press 'Clear "
                 "leftovers' (or run `python -m engine stop`), then start again.",
                 "{n} processes left by an earlier server of this app ({names}) still hold {held}: press 'Clear "
                 "leftovers' (or run `python -m engine stop`), then start again.",
                 len(left), names=", ".join(proctree.name(p) for p in left[:4]), held=proctree.held(left))


def _listed(items: list[Message]) -> Message:
    """Phrases as one comma-separated list that is still said item by item in another language (a
    ", ".join would leave a plain English string)."""
    out = items[0]
    for item in items[1:]:
        out = say("{items}, {item}", items=out, item=item)
    return out
