"""The notebook's 실험 결과 filled with this lab's numbers (`findings`), and its printed numbers beside this
machine's (`numbers`), computed from the runs each step made."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine.guide.steps import seed_text, step, value_text
from engine.measure.judge.worker_memory import worker_memory
from engine.messages import Message, mark, say

if TYPE_CHECKING:
    from engine.results.records import RunResult


# -- the notebook's 실험 결과, with this lab's numbers ---------------------------------------------------
@dataclass(frozen=True)
class Finding:
    number: int
    title: Message
    text: Message  # with this lab's numbers, or what to run for them
    measured: bool


def _mean(run) -> float | None:
    return run.summary.mean_latency_s if run is not None else None


def naive_pace(naive) -> float | None:
    """Seconds per output token of the naive baseline: its measured time over the tokens it made."""
    tokens = sum(r.output_tokens for r in naive.measured if r.ok) if naive else 0
    busy = sum(r.e2e for r in naive.measured if r.ok and r.e2e) if naive else 0
    return busy / tokens if tokens and busy else None


def naive_would_take(concurrent, naive) -> tuple[float, str] | None:
    """What naive inference would have taken for the concurrent run's answers, one after another: their
    output tokens at naive's pace ("pace"), else (no naive run) the sum of their latencies ("serial")."""
    if concurrent is None:
        return None
    tokens = sum(r.output_tokens for r in concurrent.measured if r.ok)
    if (pace := naive_pace(naive)) is not None and tokens:
        return tokens * pace, "pace"
    serial = concurrent.summary.total_latency_s or sum(r.e2e or 0 for r in concurrent.measured)
    return (serial, "serial") if serial else None


def _first(run):
    ok = [r for r in run.measured if r.ok and r.ttft is not None] if run else []
    return ok[0] if ok else None


def findings(runs: dict[str, list], scale: float = 1.0) -> list[Finding]:
    """The notebook's six findings, each with this lab's numbers from the steps' runs (`runs`: step id ->
    its runs, oldest first), or the step to run for them."""
    last = {sid: rs[-1] for sid, rs in runs.items() if rs}
    naive, vllm, conc, stream = last.get("naive"), last.get("sequential"), last.get("concurrent"), last.get("streaming")
    out: list[Finding] = []

    def add(title, text, measured):
        out.append(Finding(len(out) + 1, title, text, measured))

    todo = lambda sid: say("Run step {n} ({title}) for this lab's number.", n=step(sid).number,  # noqa: E731
                           title=step(sid).title)
    if naive and _mean(naive):
        add(mark("Naive inference is easy but slow"),
            say("{mean:.1f} s per request, {total:.1f} s for the 5 one after another: sequential, no batching.",
                mean=_mean(naive), total=naive.duration), True)
    else:
        add(mark("Naive inference is easy but slow"), todo("naive"), False)
    if vllm and _mean(vllm) and naive and _mean(naive):
        add(mark("vLLM serves the same model faster"),
            say("{mean:.1f} s per request through vLLM: {x:.1f}× naive's {naive:.1f} s, with the same prompts and "
                "token budget.", mean=_mean(vllm), x=_mean(naive) / _mean(vllm), naive=_mean(naive)), True)
    else:
        add(mark("vLLM serves the same model faster"), todo("sequential" if naive else "naive"), False)
    would = naive_would_take(conc, naive)
    if conc and would:
        text = (say("All 10 answers in {wall:.1f} s; naive inference would have taken about {would:.0f} s for the same "
                    "{tokens} tokens at its pace: continuous batching keeps the hardware busy.", wall=conc.duration,
                    would=would[0], tokens=sum(r.output_tokens for r in conc.measured if r.ok))
                if would[1] == "pace" else
                say("All 10 answers in {wall:.1f} s, against {would:.0f} s for their latencies one after another: "
                    "continuous batching keeps the hardware busy.", wall=conc.duration, would=would[0]))
        if conc.extra.cold:  # said where the number is: a first batch's start-up work is in it
            text = say("{text} (Cold: the server's first batch of 10, so it includes one-off start-up work.)",
                       text=text)
        add(mark("Concurrency is where the difference shows"), text, True)
    else:
        add(mark("Concurrency is where the difference shows"), todo("concurrent"), False)
    tuned = runs.get("tuning") or []
    if len(tuned) >= 2 and all(r.summary.output_throughput for r in tuned[-2:]):
        add(mark("max-model-len and gpu-memory-utilization set the capacity"), tuning_said(*tuned[-2:]), True)
    else:
        add(mark("max-model-len and gpu-memory-utilization set the capacity"), todo("tuning"), False)
    first = _first(stream)
    if first is not None:
        add(mark("Streaming gives an immediate TTFT"),
            say("The first token after {ttft:.0f} ms, the whole {tokens}-token answer after {total:.1f} s: without "
                "streaming the user would see nothing for {total:.1f} s.", ttft=first.ttft * 1000,
                tokens=first.output_tokens, total=first.e2e or 0.0), True)
    else:
        add(mark("Streaming gives an immediate TTFT"), todo("streaming"), False)
    add(mark("The right engine for the job"),
        say("vLLM for LLM serving, Triton for serving several kinds of models together, TensorRT-LLM for the "
            "utmost speed (the notebook's advice; not measured here)."), False)
    return out


def tuning_said(before, after) -> Message:
    """The tuning comparison in one sentence: the throughput change and why, from the two runs' own notes
    (whether requests waited for KV-cache room; on a CPU the fixed KV cache)."""
    a, b = before.summary.output_throughput, after.summary.output_throughput
    change = b / a - 1
    cpu = (before.config or {}).get("device") == "cpu"
    waited = [(r.extra.peak_waiting or 0) > 0 or (r.extra.preemptions or 0) > 0 for r in (before, after)]
    if waited[0] and not waited[1]:
        why = say("requests waited for KV-cache room with the first setting and not with the second, so more of them "
                  "ran at once.")
    elif not any(waited):
        why = say("no request waited for KV-cache room with either setting: the cache was not the limit for 10 "
                  "requests, so the change comes from elsewhere (this machine's run-to-run spread).")
    else:
        why = say("requests waited for KV-cache room with the second setting too: its cache is still the limit.")
    if cpu:
        why = say("{why} On this CPU gpu-memory-utilization does nothing: the KV cache is {gib:g} GiB in both.",
                  why=why, gib=(before.config or {}).get("cpu_kvcache_gib", 0))
    return say("Throughput {a:.0f} → {b:.0f} tok/s ({change:+.0%}) from {first} to {second}: {why}", a=a, b=b,
               change=change, first=before.label, second=after.label, why=why)


# -- the notebook's numbers beside this lab's ----------------------------------------------------------
@dataclass(frozen=True)
class Row:
    label: Message
    seed: Message  # the notebook's, in its unit
    here: Message | None  # this lab's, None: not measured yet


def _said(unit: str, v: float | None) -> Message | None:
    return None if v is None else value_text(v, unit)


def numbers(step_id: str, runs: dict[str, list], facts: dict[str, Any]) -> list[Row]:
    """Each of the step's SeedNumbers beside this lab's value (from the step's newest runs; the naive run
    for the speed-up and for what naive would have taken; the free step's reading)."""
    s = step(step_id)
    last = {sid: rs[-1] for sid, rs in runs.items() if rs}
    run, naive = last.get(step_id), last.get("naive")
    here: list[float | None] = [None] * len(s.seed)
    if step_id == "naive" and run:
        pace = naive_pace(run)
        here = [_mean(run), run.duration, 1 / pace if pace else None, worker_memory(run)["worker_peak_gb"]]
    elif step_id == "free" and facts:  # on a GPU the device's memory; else the worker's own, gone with its process
        here = ([facts.get("left_gb"), 0.0 if facts.get("after_gb") is not None else None] if facts.get("gpu") else
                [facts.get("held_gb"), facts.get("held_gb")])
    elif step_id == "test-query" and run:
        here = [_mean(run)]
    elif step_id == "sequential" and run:
        here = [_mean(run), _mean(naive) / _mean(run) if _mean(naive) and _mean(run) else None]
    elif step_id == "concurrent" and run:
        would = naive_would_take(run, naive)
        here = [run.duration, _mean(run), run.summary.output_throughput, would[0] if would else None]
    elif step_id == "tuning" and len(runs.get("tuning") or []) >= 2:
        a, b = runs["tuning"][-2:]
        ta, tb = a.summary.output_throughput, b.summary.output_throughput
        here = [b.duration, tb, (tb / ta - 1) * 100 if ta and tb else None]
    elif step_id == "streaming" and (first := _first(run)) is not None:
        total = first.e2e or 0.0
        here = [first.ttft * 1000, total, first.output_tokens, first.output_tokens / total if total else None]
    labels = [n.label for n in s.seed]
    if step_id == "naive" and run and not worker_memory(run)["gpu"]:  # no GPU here: the worker's peak RAM
        labels[3] = mark("memory after loading (here: the worker's RAM, no GPU)")
    if step_id == "free" and facts and not facts.get("gpu"):  # no GPU: what the worker's process holds once gone
        labels = [mark("allocated after cleanup (here: the worker's RAM once its process exited)"),
                  mark("still reserved (here: by the exited worker)")]
    return [Row(label, seed_text(n), _said(n.unit, v)) for label, n, v in zip(labels, s.seed, here)]
