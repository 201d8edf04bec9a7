"""Reading a vLLM server's log: its startup stages, the KV-cache capacity it reports, and, when it
dies, the cause in one sentence (only from lines that explain anything). See docs/architecture.md."""
from __future__ import annotations

import re
import signal
import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path

from engine.messages import Message, mark, say, say_n

# Startup stages, in order, recognised from vLLM's log lines (GPU and CPU builds, 0.2x-0.3x).
STAGES: tuple[tuple[str, re.Pattern], ...] = (
    (mark("launching"), re.compile(r"vLLM API server version|non-default args")),
    (mark("resolving model"), re.compile(r"Resolved architecture|Using max model len")),
    (mark("starting engine"), re.compile(r"Initializing a V1 LLM engine|Initializing an LLM engine")),
    (mark("loading weights"), re.compile(r"Starting to load model|Loading safetensors|Loading weights")),
    (mark("weights loaded"), re.compile(r"Loading weights took|Model loading took")),
    # (not "Enforce eager set, disabling torch.compile": an eager start's first lines, before its weights load)
    (mark("compiling"),
     re.compile(r"(?<!disabling )torch\.compile|Compiling a graph|Warming up model|Dynamo bytecode")),
    (mark("KV cache allocated"), re.compile(r"KV cache size:|Maximum concurrency for")),
    (mark("capturing graphs"), re.compile(r"Capturing CUDA graph|Capturing cudagraph|Graph capturing")),
    (mark("starting HTTP server"), re.compile(r"Starting vLLM API server|Available routes|Started server process")),
    (mark("serving"), re.compile(r"Application startup complete")),
)
KV_TOKENS = re.compile(r"KV cache size:\s*([\d,]+)\s*tokens")
MAX_CONCURRENCY = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request:\s*([\d.,]+)x")



class LogFollower:
    """A server's log read as it grows: its last lines, the furthest startup stage it reached, and the KV cache's
    size and the concurrency it allows (read from every new chunk: in an adopted server's long log they have
    scrolled out of the tail long ago). Thread-safe: a watcher reads, pages take copies."""

    def __init__(self, path: Path | None = None, keep: int = 400):
        self.path, self._pos = path, 0
        self._lines: deque[str] = deque(maxlen=keep)
        self._lock = threading.Lock()
        self.stage_idx = -1
        self.kv_cache_tokens: int | None = None
        self.max_concurrency: float | None = None

    def read(self) -> bool:
        """Take the whole lines written since the last read (progress bars' \r ends a line); True if any."""
        if not self.path:
            return False
        try:
            with open(self.path, "rb") as f:
                f.seek(self._pos)
                data = f.read()
        except OSError:
            return False
        cut = max(data.rfind(b"\n"), data.rfind(b"\r"))
        if cut < 0:
            return False
        self._pos += cut + 1
        text = data[: cut + 1].decode("utf-8", "replace").replace("\r", "\n")
        with self._lock:
            if self.kv_cache_tokens is None and (m := KV_TOKENS.search(text)):
                self.kv_cache_tokens = int(m.group(1).replace(",", ""))
            if self.max_concurrency is None and (m := MAX_CONCURRENCY.search(text)):
                self.max_concurrency = float(m.group(2).replace(",", ""))
            self.stage_idx = max([self.stage_idx] + [i for i, (_, p) in enumerate(STAGES) if p.search(text)])
            self._lines.extend(line for line in text.split("\n") if line.strip())
        return True

    @property
    def stage(self) -> str | None:
        return STAGES[self.stage_idx][0] if self.stage_idx >= 0 else None

    def lines(self, last: int | None = None) -> list[str]:
        with self._lock:
            out = list(self._lines)
        return out[-last:] if last else out


# Known causes of a failed start, in plain words (pattern in the log -> its sentence, made from the
# pattern's groups, each cut to 120 characters).
CAUSES: tuple[tuple[re.Pattern, Callable[..., Message]], ...] = (
    (re.compile(r"CUDA out of memory|OutOfMemoryError|out of memory", re.I),
     lambda: say("The GPU ran out of memory while starting: lower max-model-len or gpu-memory-utilization, or free "
                 "the GPU (e.g. stop the naive baseline) and start again.")),
    (re.compile(r"No available memory for the cache blocks|Insufficient memory|KV cache is needed, which is larger "
                r"than the available", re.I),
     lambda: say("There is not enough memory left for the KV cache at these settings: raise gpu-memory-utilization "
                 "(or the CPU KV cache size), or lower max-model-len.")),
    (re.compile(r"larger than the maximum number of tokens that can be stored in KV cache|max_model_len.*is larger "
                r"than|exceeds the maximum", re.I),
     lambda: say("max-model-len does not fit in the KV cache at these settings: lower max-model-len or give vLLM "
                 "more memory.")),
    (re.compile(r"greater than the derived max_model_len|User-specified max_model_len", re.I),
     lambda: say("max-model-len is above what this model supports: lower it to the model's context length.")),
    (re.compile(r"Free memory on device .* is less than desired GPU memory utilization", re.I),
     lambda: say("Another process already holds GPU memory, so the requested gpu-memory-utilization is not "
                 "available: lower it or free the GPU, then start again.")),
    (re.compile(r"validation error for \w+\s*\n\s*(?:Value error, )?(.*?)\s*\[type="),
     lambda detail: say("vLLM rejected the settings ({detail}): change that setting and start again.", detail=detail)),
    (re.compile(r"unrecognized arguments:\s*(.*)"),
     lambda flag: say("vLLM did not recognise a flag ({flag}): remove it or check its spelling.", flag=flag)),
    (re.compile(r"error: argument (.*)"),
     lambda flag: say("vLLM rejected a flag ({flag}): fix its value and start again.", flag=flag)),
    (re.compile(r"Address already in use"),
     lambda: say("The port is already in use by another program: pick another port.")),
    (re.compile(r"(?:does not appear to have a file named|is not a local folder|Repository Not Found|couldn't connect "
                r"to)", re.I),
     lambda: say("vLLM could not find the model: check the folder or hub id (a hub id needs a network).")),
)


# A log line that can explain a death: vLLM's ERROR/CRITICAL lines and bare tracebacks, never its
# INFO/WARNING chatter (a warning about file limits at startup explains nothing about a crash later).
_EXPLAINS = re.compile(r"\b(ERROR|CRITICAL)\b|^\s*(Traceback|[\w.]+(Error|Exception)\b:)")
_CHATTER = re.compile(r"\b(INFO|WARNING|DEBUG)\b")


def _known_cause(log_lines: list[str]) -> Message | None:
    """A cause from CAUSES, as its sentence."""
    text = "\n".join(log_lines[-200:])
    for pattern, sentence in CAUSES:
        if m := pattern.search(text):
            return sentence(*(g.strip()[:120] for g in m.groups()))
    return None


def _explaining_line(log_lines: list[str]) -> str | None:
    lines = [line.strip() for line in log_lines if _EXPLAINS.search(line) and not _CHATTER.search(line)]
    return lines[-1][-200:] if lines else None


def describe_failure(log_lines: list[str], returncode: int | None) -> Message:
    """One sentence for why a start failed, from the last lines of the log."""
    if known := _known_cause(log_lines):
        return known
    line = _explaining_line(log_lines) or say("it printed no error")
    return say("vLLM exited ({how}) before it was ready: {line} See the log below for details.",
               how=_exit(returncode), line=_ends_sentence(line))


def _ends_sentence(text):
    """A quoted log line or phrase with the full stop that ends the sentence, unless it has one."""
    return text if str(text).rstrip().endswith((".", "!", "?")) else say("{line}.", line=text)


def describe_death(api_pid: int, returncode: int | None, ready_for_s: float, stopped: list[str],
                   freed: str, log_after_ready: list[str], took_s: float = 0.0) -> Message:
    """One sentence for a server that died while serving: which process, at which point (counted from
    when it became ready), what was cleaned up and how long that took (measured), and a cause only when
    a log line after 'ready' gives one."""
    cause = _known_cause(log_after_ready) or _explaining_line(log_after_ready)
    values = {"pid": api_pid, "how": _exit(returncode, died=True), "served": ago(ready_for_s)}
    took = say("{seconds:.1f} s", seconds=took_s)
    cause = _ends_sentence(cause) if cause else cause
    if stopped and cause:
        return say_n("The vLLM API server (pid {pid}) {how} after serving for {served}; its {n} other process "
                     "({names}) was stopped in {took} and {freed} returned. Its log says: {cause} Start it again to "
                     "serve.",
                     "The vLLM API server (pid {pid}) {how} after serving for {served}; its {n} other processes "
                     "({names}) were stopped in {took} and {freed} returned. Its log says: {cause} Start it again to "
                     "serve.",
                     len(stopped), names=", ".join(stopped), freed=freed, cause=cause, took=took, **values)
    if stopped:
        return say_n("The vLLM API server (pid {pid}) {how} after serving for {served}; its {n} other process "
                     "({names}) was stopped in {took} and {freed} returned. Start it again to serve.",
                     "The vLLM API server (pid {pid}) {how} after serving for {served}; its {n} other processes "
                     "({names}) were stopped in {took} and {freed} returned. Start it again to serve.",
                     len(stopped), names=", ".join(stopped), freed=freed, took=took, **values)
    if cause:
        return say("The vLLM API server (pid {pid}) {how} after serving for {served}; nothing of it is left "
                   "running. Its log says: {cause} Start it again to serve.", cause=cause, **values)
    return say("The vLLM API server (pid {pid}) {how} after serving for {served}; nothing of it is left running. "
               "Start it again to serve.", **values)


def _exit(rc: int | None, died: bool = False) -> Message:
    """How the API server ended, as a phrase: 'died' or 'was killed by SIGKILL (...)' in a death,
    'exited' or 'killed by SIGKILL (...)' in a failed start."""
    if rc is None:
        return say("died") if died else say("exited")
    if rc < 0:
        try:
            sig = signal.Signals(-rc).name
        except ValueError:
            sig = say("signal {number}", number=-rc)
        if rc == -signal.SIGKILL:
            return (say("was killed by {signal} (a kill -9, or the system's out-of-memory killer)", signal=sig) if died
                    else say("killed by {signal} (a kill -9, or the system's out-of-memory killer)", signal=sig))
        return say("was killed by {signal}", signal=sig) if died else say("killed by {signal}", signal=sig)
    return say("exited with code {code}", code=rc) if died else say("code {code}", code=rc)


def ago(s: float) -> Message:
    """A duration in words: seconds under two minutes, else minutes."""
    return say("{seconds:.0f} s", seconds=s) if s < 120 else say("{minutes:.0f} min", minutes=s / 60)


def after_ready(lines: list[str]) -> list[str]:
    """The log lines after vLLM said it was serving (all of them if that line scrolled out)."""
    serving = STAGES[-1][1]
    idx = max((i for i, line in enumerate(lines) if serving.search(line)), default=-1)
    return lines[idx + 1:]
