"""A rehearsal's sheet (engine.guide.rehearsal writes it): each step's time, vLLM's start, the memory at each
step, what failed and why, the session's expected length and the machine it ran on; said in a reader's
language, and that machine compared with the day's. Reading only: no file, process or thread of its own."""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from engine.digits import significant
from engine.guide.steps import STEP_IDS, Step, step
from engine.messages import Message, from_json, say, to_json, translate
from engine.serving import models

TALK_S = 180.0  # the presenter's own time per step, by default: what the steps' machine time leaves out


@dataclass
class StepSheet:
    """One step as the rehearsal ran it."""

    id: str
    seconds: float | None = None  # from the press to the step's end (None: never reached)
    ok: bool = False
    error: dict | str | None = None  # what failed and why: a Message as stored() keeps it, or plain text
    requests: int = 0
    failed_requests: int = 0
    ready_s: float | None = None  # the start step's: vLLM's own start-to-ready
    memory_gb: dict[str, float] = field(default_factory=dict)  # each memory series' peak during the step
    runs: list[str] = field(default_factory=list)

    @property
    def step(self) -> Step:
        return step(self.id)

    @property
    def why(self) -> Message | str | None:
        """What failed, to be said again in the reader's language."""
        if isinstance(self.error, dict):
            return from_json(self.error, self.error.get("english")) or self.error.get("english")
        return self.error


@dataclass
class Sheet:
    started_at: float
    ended_at: float | None
    scale: float
    model: str  # the model's path, as the guide's State keeps it
    machine: dict[str, Any]  # what a day's machine is compared on (engine.guide.rehearsal.machine)
    steps: list[StepSheet]
    memory_before_gb: dict[str, float] = field(default_factory=dict)
    talk_s: float = TALK_S
    cancelled: bool = False

    @property
    def id(self) -> str:
        """What its runs carry in History (Notes.rehearsal)."""
        return f"rehearsal-{int(self.started_at)}"

    def of(self, step_id: str) -> StepSheet | None:
        return next((s for s in self.steps if s.id == step_id), None)

    @property
    def machine_s(self) -> float:
        """The steps' own time, together."""
        return sum(s.seconds or 0.0 for s in self.steps)

    @property
    def expected_s(self) -> float:
        """The session's expected length: the steps' time and the presenter's talk at each."""
        return self.machine_s + self.talk_s * len(self.steps)

    @property
    def complete(self) -> bool:
        """Run to its end: neither stopped half way nor still under way (only then is there a length to expect)."""
        return not self.cancelled and self.ended_at is not None

    @property
    def failed(self) -> list[StepSheet]:
        return [s for s in self.steps if not s.ok or s.failed_requests]

    def to_dict(self) -> dict[str, Any]:
        return {"version": 1, **asdict(self)}

    @classmethod
    def from_dict(cls, d: dict) -> "Sheet":
        known = StepSheet.__dataclass_fields__
        steps = [StepSheet(**{k: v for k, v in s.items() if k in known}) for s in d.get("steps") or []
                 if isinstance(s, dict) and s.get("id") in STEP_IDS]
        return cls(started_at=float(d["started_at"]), ended_at=d.get("ended_at"), scale=float(d["scale"]),
                   model=str(d["model"]), machine=dict(d.get("machine") or {}), steps=steps,
                   memory_before_gb=dict(d.get("memory_before_gb") or {}), talk_s=float(d.get("talk_s", TALK_S)),
                   cancelled=bool(d.get("cancelled")))


def stored(m: Message | str) -> dict | str:
    """A failure's sentence as the sheet keeps it: its template (said again in Korean) and its English."""
    if isinstance(m, Message) and (d := to_json(m)) is not None:
        return {**d, "english": str(m)}
    return str(m)


# -- the day's machine against the rehearsal's ----------------------------------------------------------
WHAT = {"gpus": say("GPU"), "cpu": say("CPU"), "cores": say("CPU cores"), "vllm": say("vLLM version"),
        "model": say("model"), "scale": say("token budget")}


def differences(then: dict[str, Any], now: dict[str, Any]) -> list[Message]:
    """Each way the day's machine differs from the rehearsal's, a phrase each ("GPU: none in rehearsal, NVIDIA
    H100 now"); [] when the rehearsal's times hold here."""
    return [say("{what}: {then} in rehearsal, {now} now", what=what, then=_value(key, then.get(key)),
                now=_value(key, now.get(key)))
            for key, what in WHAT.items() if then.get(key) != now.get(key)]


def _value(key: str, v: Any) -> Any:
    if key == "gpus":
        return ", ".join(v) if v else say("none")
    if v in (None, ""):
        return say("unknown")
    if key == "scale":
        return f"{v:.0%}"
    return models.shown_name(v) if key == "model" else v


# -- in words ---------------------------------------------------------------------------------------
def length(seconds: float, minutes_from: float = 600) -> Message:
    """A length in seconds (a step's: "121 s"), in minutes from `minutes_from` on (a session's from 90 s)."""
    return (say("{m} min", m=significant(seconds / 60)) if seconds >= minutes_from else
            say("{s} s", s=significant(seconds)))  # a step of 0.40 s is not "0 s"


def took(s: StepSheet) -> Message:
    """What a step cost in rehearsal, as the agenda says it: "took 121 s in rehearsal (vLLM ready after 98 s)"."""
    if s.seconds is None:
        return say("not reached in rehearsal")
    if not s.ok:
        return say("failed in rehearsal after {time}: {why}", time=length(s.seconds), why=s.why or say("cancelled"))
    if s.ready_s is not None:
        return say("took {time} in rehearsal (vLLM ready after {ready})", time=length(s.seconds),
                   ready=length(s.ready_s))
    return say("took {time} in rehearsal", time=length(s.seconds))


def result(s: StepSheet) -> Message:
    if not s.ok:
        return say("failed: {why}", why=s.why or say("cancelled"))
    if s.failed_requests:
        return say("{failed} of {n} requests failed: {why}", failed=s.failed_requests, n=s.requests, why=s.why or "")
    return say("ok")


def expected(sheet: Sheet) -> Message:
    if not sheet.complete:  # the steps not run have no time: a sum of the others would be a length too short
        return say("Stopped after {n} of the {total} steps, so there is no session length to expect: the steps that "
                   "ran took {steps} of their own time.", n=len(sheet.steps), total=len(STEP_IDS),
                   steps=length(sheet.machine_s, 90)) if sheet.cancelled else \
            say("Under way: {n} of the {total} steps so far, {steps} of their own time.", n=len(sheet.steps),
                total=len(STEP_IDS), steps=length(sheet.machine_s, 90))
    return say("Expected length: about {total} ({steps} of the steps' own time and {talk} of talk at each of the "
               "{n} steps).", total=length(sheet.expected_s, 90), steps=length(sheet.machine_s, 90),
               talk=length(sheet.talk_s, 90), n=len(sheet.steps))


def machine_said(m: dict[str, Any]) -> Message:
    if m.get("gpus"):
        return say("{gpus}, vLLM {vllm}", gpus=", ".join(m["gpus"]), vllm=m.get("vllm") or "?")
    return say("CPU: {cpu}, {cores} cores, vLLM {vllm}", cpu=m.get("cpu") or "?", cores=m.get("cores") or "?",
               vllm=m.get("vllm") or "?")


def heading(sheet: Sheet, when: str) -> Message:
    """The sheet's one line of what and where: `when` as the reader's locale writes it."""
    return say("Rehearsed {when} · token budget {share} · model {model} · {machine}", when=when,
               share=f"{sheet.scale:.0%}", model=models.shown_name(sheet.model), machine=machine_said(sheet.machine))


def memory(s: StepSheet, lang: str) -> str:
    return ", ".join(f"{translate(k, lang)} {significant(v)} GB" for k, v in s.memory_gb.items())


TITLE = say("Guided lab rehearsal")
# the sheet showed "system 4.5 GB, vLLM server 4.9 GB": the part above the whole, each true by its definition
MEMORY_NOTE = say("Memory: the system's figure is the RAM in use without the page cache; a process's sums the resident "
                  "memory of its processes, counting shared libraries once for each and the files they map, so it can "
                  "be higher than the system's.")
COLUMNS = (say("Step"), say("Time"), say("vLLM ready after"), say("Memory at its peak"), say("Result"))


def text(sheet: Sheet, lang: str = "en") -> str:
    """The sheet as Markdown in `lang`: what `python -m engine rehearse` prints and writes beside the JSON."""
    t = lambda m: translate(m, lang)  # noqa: E731
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(sheet.started_at))
    lines = [f"# {t(TITLE)}", "", t(heading(sheet, when)), "",
             "| " + " | ".join(t(c) for c in COLUMNS) + " |", "|---" * len(COLUMNS) + "|"]
    for s in sheet.steps:
        cells = [f"{s.step.number}. {t(s.step.title)}", "–" if s.seconds is None else t(length(s.seconds)),
                 "" if s.ready_s is None else t(length(s.ready_s)), memory(s, lang), t(result(s))]
        lines.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    lines += ["", t(MEMORY_NOTE), "", t(expected(sheet))]
    if sheet.cancelled:
        lines += ["", t(say("The rehearsal was stopped before its end: the steps not listed did not run."))]
    return "\n".join(lines) + "\n"
