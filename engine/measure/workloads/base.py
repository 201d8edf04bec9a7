"""What every workload kind hands the load generator (`Plan`: each request's prompt, answer length, planned
send time, or each conversation's turns) and what a run records of it (`Plan.summary`: kind, name, rows, a
content hash, the length summary — never the file). See docs/architecture.md."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.errors import LabError
from engine.measure.judge.stats import percentile
from engine.measure.load.spec import LoadSpec
from engine.messages import Message, say

# As the history's imports: a bigger file is a mistake (or wants sampling before it is uploaded)
MAX_FILE_BYTES = 64 * 1024 * 1024
MAX_ROWS = 1_000_000
MAX_PROMPT_CHARS = 200_000  # ~50k tokens: beyond any context this lab serves


SEEDED = ("lengths", "prefix-repetition", "fixed-text")  # the kinds a seed makes (kinds.SEEDED)

# How far reading a large file has come: report(done, total, what), `what` a Message such as "rows read"
Report = Callable[[int, int, Message], None]
REPORT_EVERY = 20_000  # items between two reports (a 1,000,000-row file: 50 of them)


def reported(items: Sequence, report: Report | None, what: Message, every: int = REPORT_EVERY) -> Iterator:
    """`items` one by one, with `report(done, total, what)` after every `every` of them and after the last."""
    total = len(items)
    for i, item in enumerate(items, 1):
        yield item
        if report is not None and (i % every == 0 or i == total):
            report(i, total, what)


class WorkloadError(LabError):
    """A workload file or setting cannot be used: one sentence naming the first problem (the file's row)."""


def uploaded_text(data: bytes, name: str, *, too_big: str, binary: str) -> str:
    """An uploaded file's bytes as text, checked as every workload file is: size, binary content, UTF-8
    (`too_big` and `binary` are the kind's own sentences)."""
    if len(data) > MAX_FILE_BYTES:
        raise WorkloadError(too_big)
    if b"\x00" in data[:65536]:
        raise WorkloadError(binary)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise WorkloadError(say("{name} is not UTF-8 text (byte {at}): save it as UTF-8 and upload it again.",
                                name=name, at=e.start + 1)) from None


def read_file(path: str, text: bool = False) -> tuple[bytes, str]:
    """A workload file named on this machine's command line (the CLI's --dataset / --trace / --fixed-text FILE, a
    plain `text` file), as (bytes, its name): checked for what a path can be before its content is (a missing file,
    a folder, one over the cap, one that cannot be read); the content is then checked as an upload's is
    (datasets.parse, traces.parse, fixed_text.plan)."""
    p = Path(path).expanduser()
    if not p.exists():
        raise WorkloadError(say("{path} does not exist: give the path of a text file.", path=path) if text else
                            say("{path} does not exist: give the path of a JSONL, JSON or CSV file.", path=path))
    if p.is_dir():
        raise WorkloadError(say("{path} is a folder: give the path of a text file in it.", path=path) if text else
                            say("{path} is a folder: give the path of a JSONL, JSON or CSV file in it.", path=path))
    try:
        size = p.stat().st_size
        if size > MAX_FILE_BYTES:
            raise WorkloadError(say("{name} is {mb:.0f} MB; a workload file is read up to {limit} MB: give the first "
                                    "part or a sample of it.", name=p.name, mb=size / 2**20,
                                    limit=MAX_FILE_BYTES // 2**20))
        return p.read_bytes(), p.name
    except OSError as e:
        raise WorkloadError(say("{path} cannot be read ({why}): check that you may read it.", path=path,
                                why=e.strerror or str(e))) from None


def length_summary(values: Sequence[int]) -> dict[str, float] | None:
    """min / mean / median / p99 / max of token lengths; None for none."""
    median, p99 = percentile(values, 50), percentile(values, 99)
    if median is None or p99 is None:  # no values
        return None
    return {"min": min(values), "mean": sum(values) / len(values), "median": median, "p99": p99, "max": max(values)}


@dataclass
class Plan:
    """A workload ready to send. `summary` is what the run records (LoadSpec.workload -> Load.workload);
    `input_tokens` / `output_tokens` are each request's lengths (for a histogram before running)."""

    kind: str  # one of kinds.KINDS
    prompts: list[str]
    summary: dict[str, Any]
    max_tokens_each: list[int] | None = None
    offsets: list[float] | None = None
    conversations: list[list[str]] | None = None
    think_time_s: float = 0.0
    input_tokens: list[int] = field(default_factory=list)
    output_tokens: list[int] = field(default_factory=list)

    def apply(self, spec: LoadSpec, ignore_eos: bool | None = None) -> LoadSpec:
        """`spec` sending this workload: its prompts (one request each), lengths, schedule or conversations.
        With per-request lengths `ignore_eos` defaults to True, so every answer runs to its length and two
        runs compare exactly (vLLM's extension; a server that lacks it ends at EOS)."""
        over: dict[str, Any] = {"prompts": list(self.prompts), "num_requests": None, "workload": dict(self.summary),
                                "max_tokens_each": self.max_tokens_each, "offsets": self.offsets,
                                "conversations": self.conversations,
                                "prompt_seed": self.summary.get("seed") if self.kind in SEEDED else None}
        if self.conversations is not None:
            over["think_time_s"] = self.think_time_s
        if self.max_tokens_each:
            over["max_tokens"] = max(self.max_tokens_each)
            over["ignore_eos"] = True if ignore_eos is None else ignore_eos
        elif ignore_eos is not None:
            over["ignore_eos"] = ignore_eos
        if self.offsets is not None:
            over["shape"] = "trace"
        return dataclasses.replace(spec, **over)
