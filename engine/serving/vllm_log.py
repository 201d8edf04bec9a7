"""Reading a vLLM server's log: its startup stages, the KV-cache capacity it reports, and, when it
dies, the cause in one sentence (only from lines that explain anything). See docs/architecture.md."""
from __future__ import annotations

import re
import signal

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


# A log line that can explain a death: vLLM's ERROR/CRITICAL lines and bare tracebacks, never its
# INFO/WARNING chatter (a warning about file limits at startup explains nothing about a crash later).
_EXPLAINS = re.compile(r"\b(ERROR|CRITICAL)\b|^\s*(Traceback|[\w.]+(Error|Exception)\b:)")
_CHATTER = re.compile(r"\b(INFO|WARNING|DEBUG)\b")


def _known_cause(log_lines: list[str]) -> str | None:
    """A cause from CAUSES, as its sentence."""
    text = "\n".join(log_lines[-200:])
    for pattern, sentence in CAUSES:
        if m := pattern.search(text):
            return sentence.format(*(g.strip()[:120] for g in m.groups()))
    return None


def _explaining_line(log_lines: list[str]) -> str | None:
    lines = [l.strip() for l in log_lines if _EXPLAINS.search(l) and not _CHATTER.search(l)]
    return lines[-1][-200:] if lines else None


def describe_failure(log_lines: list[str], returncode: int | None) -> str:
    """One sentence for why a start failed, from the last lines of the log."""
    if known := _known_cause(log_lines):
        return known
    line = _explaining_line(log_lines) or "it printed no error"
    return f"vLLM exited ({_exit(returncode)}) before it was ready: {line}. See the log below for details."


def describe_death(api_pid: int, returncode: int | None, ready_for_s: float, stopped: list[str],
                   freed: str, log_after_ready: list[str]) -> str:
    """One sentence for a server that died while serving: which process, at which point, what was
    cleaned up, and a cause only when a log line after 'ready' gives one."""
    cause = _known_cause(log_after_ready) or _explaining_line(log_after_ready)
    what = f"The vLLM API server (pid {api_pid}) {_exit(returncode, died=True)} after serving for {ago(ready_for_s)}"
    rest = (f"; its {len(stopped)} other process{'es' if len(stopped) != 1 else ''} ({', '.join(stopped)}) "
            f"{'were' if len(stopped) != 1 else 'was'} stopped and {freed} returned"
            if stopped else "; nothing of it is left running")
    because = f". Its log says: {cause}" if cause else ""
    return f"{what}{rest}{because}. Start it again to serve."


def _exit(rc: int | None, died: bool = False) -> str:
    if rc is None:
        return "died" if died else "exited"
    if rc < 0:
        try:
            sig = signal.Signals(-rc).name
        except ValueError:
            sig = f"signal {-rc}"
        why = " (a kill -9, or the system's out-of-memory killer)" if rc == -signal.SIGKILL else ""
        return f"was killed by {sig}{why}" if died else f"killed by {sig}{why}"
    return f"exited with code {rc}" if died else f"code {rc}"


def ago(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.0f} min"


def after_ready(lines: list[str]) -> list[str]:
    """The log lines after vLLM said it was serving (all of them if that line scrolled out)."""
    serving = STAGES[-1][1]
    idx = max((i for i, l in enumerate(lines) if serving.search(l)), default=-1)
    return lines[idx + 1:]
