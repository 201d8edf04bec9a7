"""The notebook's 실험 결과 filled with this lab's numbers (`findings`), and its printed numbers beside this
machine's (`numbers`), computed from the runs each step made. A finding's heading states the notebook's claim only
where engine.measure.judge.verdict finds the difference beyond the noise of the step's repeats; within it the
heading says there is no measurable difference on this machine, and a run measured beside other programs or
clients (engine.observe.disturbance) decides nothing."""
from __future__ import annotations

from dataclasses import dataclass
from statistics import fmean
from typing import Any

from engine.digits import change, significant, times
from engine.guide.steps import seed_text, step, value_text
from engine.measure.judge import verdict
from engine.measure.judge.worker_memory import worker_memory
from engine.messages import Message, mark, say
from engine.observe import disturbance

NO_DIFFERENCE = mark("No measurable difference on this machine")
BUSY = mark("No verdict: something else ran beside the measurement")
UNDECIDED = mark("Not decided: one value a side shows no noise")


# -- the notebook's 실험 결과, with this lab's numbers ---------------------------------------------------
@dataclass(frozen=True)
class Finding:
    number: int
    title: Message  # the notebook's claim only where this lab's numbers carry it
    text: Message  # with this lab's numbers, or what to run for them
    measured: bool
    # +1: the notebook's claim holds here beyond noise; -1: its opposite does; 0: no measurable difference;
    # None: nothing decided (not measured, not a comparison, one value a side, a disturbed run)
    claim: int | None = None
    verdict: Any = None  # the engine.measure.judge.verdict.Verdict its heading follows, for a chart to say the same


def _ok(runs) -> list:
    return [r for run in runs for r in run.measured if r.ok]


def _mean_latency(runs) -> float | None:
    """The mean answer time over every measured request of `runs` (a step's repeats pooled)."""
    e2e = [r.e2e for r in _ok(runs) if r.e2e is not None]
    return fmean(e2e) if e2e else None


def _avg(values) -> float | None:
    xs = [v for v in values if v is not None]
    return fmean(xs) if xs else None


def naive_pace(naive) -> float | None:
    """Seconds per output token of the naive baseline: its measured time over the tokens it made."""
    tokens = sum(r.output_tokens for r in naive.measured if r.ok) if naive else 0
    busy = sum(r.e2e for r in naive.measured if r.ok and r.e2e) if naive else 0
    return busy / tokens if tokens and busy else None


def _naive_rates(naive) -> list[float]:
    """The naive baseline's decode speed per answer (tokens over its time), one value a request."""
    return [r.output_tokens / r.e2e for r in naive.measured if r.ok and r.e2e and r.output_tokens] if naive else []


def naive_would_take(concurrent, naive) -> tuple[float, str] | None:
    """What naive inference would have taken for one concurrent run's answers (the mean over `concurrent`, a
    run or its repeats), one after another: their output tokens at naive's pace ("pace"), else (no naive run)
    the sum of their latencies ("serial")."""
    runs = concurrent if isinstance(concurrent, list) else [concurrent] if concurrent is not None else []
    if not runs:
        return None
    tokens = _avg([sum(r.output_tokens for r in run.measured if r.ok) for run in runs])
    if (pace := naive_pace(naive)) is not None and tokens:
        return tokens * pace, "pace"
    serial = _avg([run.summary.total_latency_s or sum(r.e2e or 0 for r in run.measured) for run in runs])
    return (serial, "serial") if serial else None


def _first(run):
    ok = [r for r in run.measured if r.ok and r.ttft is not None] if run else []
    return ok[0] if ok else None


def _busy(runs) -> Message | None:
    """What disturbed `runs` (the first disturbed one's sentence, with how many were); None when all were quiet."""
    return disturbance.said_of([r for r in runs if r is not None])


def _heading(v, claim: Message, opposite: Message, either_way: bool = False) -> tuple[Message, int | None]:
    """A finding's heading and claim, as its verdict's `finding` decides them (engine.measure.judge.verdict, the
    rule every page follows): the claim only beyond noise on a quiet machine, "no measurable difference on this
    machine" within noise, no verdict beside a disturbed run, nothing decided from one value a side."""
    if v is not None and v.disturbed is not None:
        return BUSY, None
    if v is None or v.finding is None:
        return UNDECIDED, None
    if not v.finding:
        return NO_DIFFERENCE, 0
    if either_way or (v.ratio or 0) > 1:
        return claim, 1
    return opposite, -1


def _with_busy(text: Message, runs) -> Message:
    return say("{text} {busy}", text=text, busy=said) if (said := _busy(runs)) is not None else text


# -- one computation per step: its numbers, its verdict (the table and the finding both read these) ----------
def speedup(naive, sequential: list) -> dict[str, Any] | None:
    """Naive against vLLM one request at a time, the same prompts: both means and the verdict on their answer
    times prompt by prompt (verdict.per_prompt, as Naive vs vLLM judges it; each prompt's vLLM time the geometric
    mean of its repeats), the ratio naive's over vLLM's: the speed-up."""
    if naive is None or not sequential:
        return None
    mean_naive, mean_vllm = _mean_latency([naive]), _mean_latency(sequential)
    if mean_naive is None or mean_vllm is None:
        return None
    v = verdict.per_prompt(sequential, naive, name="", label_a="vLLM", label_b="naive")
    return {"naive": mean_naive, "vllm": mean_vllm, "verdict": v, "x": v.ratio if v else None}


def concurrency(concurrent: list, naive) -> dict[str, Any] | None:
    """Ten at once through vLLM (its repeats) against naive inference: the mean wall time, latency and
    throughput, what naive would have taken, and the verdict on the throughput (vLLM's runs against naive's
    decode speed per answer; without a naive run, each run's wall time against its latencies one after another)."""
    if not concurrent:
        return None
    would = naive_would_take(concurrent, naive)
    tput = _avg([r.summary.output_throughput for r in concurrent])
    if (rates := _naive_rates(naive)):
        # naive's answers are one run's (its factor unseen by their spread), vLLM's values its runs
        v = verdict.of_values(rates, [r.summary.output_throughput for r in concurrent], naive, concurrent, name="",
                              label_a="naive", label_b="vLLM", unit="tok/s", runs=(1, 0))
    else:
        v = verdict.of_values([r.duration for r in concurrent], [r.summary.total_latency_s for r in concurrent],
                              [], concurrent, name="", label_a="wall", label_b="serial", unit="s")
    return {"wall": _avg([r.duration for r in concurrent]), "latency": _mean_latency(concurrent), "tput": tput,
            "would": would, "verdict": v, "naive_tput": _avg(rates) if rates else None,
            "tokens": _avg([sum(r.output_tokens for r in run.measured if r.ok) for run in concurrent])}


def tuning_groups(runs: list) -> tuple[list, list]:
    """The tuning comparison's two settings, each with its repeats, in the order they ran (by label)."""
    labels = list(dict.fromkeys(r.label for r in runs))
    if len(labels) < 2:
        return runs[:1], runs[1:2]
    return [r for r in runs if r.label == labels[-2]], [r for r in runs if r.label == labels[-1]]


def tuned(runs: list) -> dict[str, Any] | None:
    """The two settings' throughput, the second's mean wall time and the verdict on their throughput. The
    throughputs are the verdict's own centres (each side's geometric mean over its repeats that count), so the
    change the finding, the table and the chart's caption state is the one the verdict judged."""
    a, b = tuning_groups(runs)
    if not a or not b or not all(r.summary.output_throughput for r in a + b):
        return None
    v = verdict.compare_runs(a, b, "output_throughput", name="", label_a=str(a[0].label), label_b=str(b[0].label),
                             unit="tok/s")
    if v is None:  # no repeat of a side counted (each cut short)
        return None
    return {"a": a, "b": b, "tput_a": v.center_a, "tput_b": v.center_b, "wall_b": _avg([r.duration for r in b]),
            "verdict": v}


def streamed(runs: list) -> dict[str, Any] | None:
    """The streamed answer's first token and end (means over the repeats) and the verdict that the first token
    comes sooner than the whole answer."""
    firsts = [f for r in runs if (f := _first(r)) is not None]
    if not firsts:
        return None
    ttft, total = [f.ttft for f in firsts], [f.e2e or 0.0 for f in firsts]
    v = verdict.of_values(ttft, total, runs, [], name="", label_a="TTFT", label_b="total", unit="s")
    tokens = _avg([f.output_tokens for f in firsts])
    rates = [f.output_tokens / f.e2e for f in firsts if f.e2e]
    return {"ttft": fmean(ttft), "total": fmean(total), "tokens": tokens, "rate": _avg(rates), "verdict": v,
            "n": len(firsts)}


FINDING_OF = {"naive": 0, "sequential": 1, "concurrent": 2, "tuning": 3, "streaming": 4}  # a step's, in findings()


def findings(runs: dict[str, list]) -> list[Finding]:
    """The notebook's six findings, each with this lab's numbers from the steps' runs (`runs`: step id ->
    the newest press's runs, its repeats), or the step to run for them."""
    naive = (runs.get("naive") or [None])[-1]
    out: list[Finding] = []

    def add(title, text, measured, claim=None, v=None):
        out.append(Finding(len(out) + 1, title, text, measured, claim, v))

    todo = lambda sid: say("Run step {n} ({title}) for this lab's number.", n=step(sid).number,  # noqa: E731
                           title=step(sid).title)
    if naive and (mean := _mean_latency([naive])):
        add(mark("Naive inference is easy but slow"), _with_busy(
            say("{mean} s per request, {total} s for the 5 one after another: sequential, no batching.",
                mean=significant(mean), total=significant(naive.duration)), [naive]), True)
    else:
        add(mark("Naive inference is easy but slow"), todo("naive"), False)
    seq = runs.get("sequential") or []
    if (sp := speedup(naive, seq)) is not None:
        v, both = sp["verdict"], [naive, *seq]
        title, claim = _heading(v, mark("vLLM serves the same model faster"),
                                mark("Naive inference answered faster here"))
        values = dict(mean=significant(sp["vllm"]), naive=significant(sp["naive"]),
                      x=times(sp["x"]) if sp["x"] else "–", interval=v.interval or "–", how=v.how)
        text = (say("{mean} s per request through vLLM against naive's {naive} s, with the same prompts and "
                    "token budget: {x}× ({interval}; {how}).", **values) if claim == 1 else
                say("{mean} s per request through vLLM against naive's {naive} s, with the same prompts and "
                    "token budget: vLLM ran at only {x}× naive's speed ({interval}; {how}).", **values)
                if claim == -1 else
                say("{mean} s per request through vLLM against naive's {naive} s, with the same prompts and "
                    "token budget: {x}×, within this machine's noise ({interval}, which holds no change; {how}).",
                    **values) if claim == 0 else
                say("{mean} s per request through vLLM against naive's {naive} s, with the same prompts and "
                    "token budget: {x}× as measured, not judged ({interval}; {how}).", **values)
                if v.interval is not None else  # beside a disturbed run: how sure it would be, and no claim
                say("{mean} s per request through vLLM against naive's {naive} s, with the same prompts and "
                    "token budget: {x}× ({how}).", **values))
        add(title, _with_busy(text, both), True, claim, v)
    else:
        add(mark("vLLM serves the same model faster"), todo("sequential" if naive else "naive"), False)
    conc = runs.get("concurrent") or []
    if (c := concurrency(conc, naive)) is not None and c["would"] and c["wall"]:
        v, both = c["verdict"], [naive, *conc] if naive else conc
        title, claim = _heading(v, mark("Concurrency is where the difference shows"),
                                mark("Concurrency did not pay off here"))
        n, wall, would = len(conc), significant(c["wall"]), significant(c["would"][0])
        # the lesson ("continuous batching keeps the hardware busy") only where the verdict carries it
        text = ((say("All 10 answers in {wall} s ({n} runs' mean); naive inference would have taken about "
                     "{would} s for the same {tokens:.0f} tokens at its pace: continuous batching keeps the "
                     "hardware busy.", wall=wall, n=n, would=would, tokens=c["tokens"] or 0) if claim == 1
                 else say("All 10 answers in {wall} s ({n} runs' mean); naive inference would have taken about "
                          "{would} s for the same {tokens:.0f} tokens at its pace.", wall=wall, n=n, would=would,
                          tokens=c["tokens"] or 0))
                if c["would"][1] == "pace" else
                say("All 10 answers in {wall} s ({n} runs' mean), against {would} s for their latencies one "
                    "after another: continuous batching keeps the hardware busy.", wall=wall, n=n, would=would)
                if claim == 1 else
                say("All 10 answers in {wall} s ({n} runs' mean), against {would} s for their latencies one "
                    "after another.", wall=wall, n=n, would=would))
        if v is not None and v.decided:
            how = (say("{method}, {a} naive answers and {b} runs; {between}", method=v.method, a=v.n_a, b=v.n_b,
                       between=v.between) if c["naive_tput"] is not None and v.between is not None else
                   v.how)  # naive's side is its answers, not runs
            values = dict(text=text, x=times(v.ratio) if v.ratio else "–", interval=v.interval or "–", how=how)
            # without a naive run the verdict is the wall time against the same answers one after another
            text = (say("{text} Throughput {x}× naive's ({interval}; {how}).", **values)
                    if c["naive_tput"] is not None else
                    say("{text} One after another would have taken {x}× as long ({interval}; {how}).", **values)) \
                if claim else say("{text} The difference is within this machine's noise ({interval}; {how}).",
                                  text=text, interval=v.interval or "–", how=how) if claim == 0 else text
        if any(r.extra.warmth.cold for r in conc):  # said where the number is: a first batch's start-up work is in it
            text = say("{text} (Cold: the server's first batch of 10, so it includes one-off start-up work.)",
                       text=text)
        add(title, _with_busy(text, both), True, claim, v)
    else:
        add(mark("Concurrency is where the difference shows"), todo("concurrent"), False)
    if (t := tuned(runs.get("tuning") or [])) is not None:
        group = t["a"] + t["b"]
        title, claim = _heading(t["verdict"], mark("max-model-len and gpu-memory-utilization set the capacity"),
                                mark("max-model-len and gpu-memory-utilization set the capacity"), either_way=True)
        add(title, _with_busy(tuning_said(t), group), True, claim, t["verdict"])
    else:
        add(mark("max-model-len and gpu-memory-utilization set the capacity"), todo("tuning"), False)
    stream = runs.get("streaming") or []
    if (sm := streamed(stream)) is not None:
        v = sm["verdict"]
        title, claim = _heading(v, mark("Streaming gives an immediate TTFT"),
                                mark("Streaming gave no earlier first token here"))
        text = say("The first token after {ttft} ms, the whole {tokens:.0f}-token answer after {total} s: "
                   "without streaming the user would see nothing for {total} s.", ttft=significant(sm["ttft"] * 1000),
                   tokens=sm["tokens"] or 0, total=significant(sm["total"]))
        if v is not None and v.decided:  # what was compared, by how much and how sure, not the method alone
            text = say("{text} The whole answer took {x}× as long as its first token ({interval}; {how}).", text=text,
                       x=times(v.ratio) if v.ratio else "–", interval=v.interval or "–", how=v.how)
        add(title, _with_busy(text, stream), True, claim, v)
    else:
        add(mark("Streaming gives an immediate TTFT"), todo("streaming"), False)
    add(mark("The right engine for the job"),
        say("vLLM for LLM serving, Triton for serving several kinds of models together, TensorRT-LLM for the "
            "utmost speed (the notebook's advice; not measured here)."), False)
    return out


def tuning_said(t: dict[str, Any]) -> Message:
    """The tuning comparison in one sentence: the throughput change, how sure, and why, from the runs' own notes
    (whether requests waited for KV-cache room; on a CPU the fixed KV cache). Beside a disturbed run (the
    verdict's `disturbed`) the heading says "No verdict" and the sentence judges nothing either."""
    a, b, v = t["a"], t["b"], t["verdict"]
    cpu = (a[0].config or {}).get("device") == "cpu"
    waited = [any((r.extra.kv.peak_waiting or 0) > 0 or (r.extra.kv.preemptions or 0) > 0 for r in side)
              for side in (a, b)]
    beyond = v is not None and v.beyond_noise
    if v is not None and v.disturbed is not None:
        verdict_said = say("not judged, because something else ran beside the measurement")
    elif v is None or v.beyond_noise is None:
        verdict_said = None  # its heading says it: "Not decided: one value a side shows no noise"
    elif beyond:
        verdict_said = say("beyond this machine's noise ({interval}; {how})", interval=v.interval, how=v.how)
    else:
        verdict_said = say("within this machine's noise ({interval}, which holds no change; {how})",
                           interval=v.interval, how=v.how)
    if waited[0] and not waited[1]:
        why = say("requests waited for KV-cache room with the first setting and not with the second, so more of them "
                  "ran at once.")
    elif not any(waited):
        why = say("no request waited for KV-cache room with either setting, so the cache was not the limit for "
                  "10 requests.")
    else:
        why = say("requests waited for KV-cache room with the second setting too, so its cache is still the "
                  "limit.")
    if cpu:
        why = say("{why} On this CPU gpu-memory-utilization does nothing: the KV cache is {gib:g} GiB in both.",
                  why=why, gib=(a[0].config or {}).get("cpu_kvcache_gib", 0))
    numbers = dict(a=significant(t["tput_a"]), b=significant(t["tput_b"]),
                   change=f"{change(t['tput_b'] / t['tput_a'])} %", first=a[0].label, second=b[0].label, why=why)
    if verdict_said is None:
        return say("Throughput {a} → {b} tok/s ({change}) from {first} to {second}: {why}", **numbers)
    return say("Throughput {a} → {b} tok/s ({change}) from {first} to {second}, {verdict}: {why}",
               verdict=verdict_said, **numbers)


# -- the notebook's numbers beside this lab's ----------------------------------------------------------
@dataclass(frozen=True)
class Row:
    label: Message
    seed: Message  # the notebook's, in its unit
    here: Message | None  # this lab's, None: not measured yet


def numbers(step_id: str, runs: dict[str, list], facts: dict[str, Any]) -> list[Row]:
    """Each of the step's SeedNumbers beside this lab's value (from the step's newest press: its repeats'
    means, the same computation as its finding; the naive run for the speed-up and for what naive would have
    taken; the free step's reading)."""
    s = step(step_id)
    mine, naive = runs.get(step_id) or [], (runs.get("naive") or [None])[-1]
    here: list[float | None] = [None] * len(s.seed)
    shown: list[str | None] = [None] * len(s.seed)  # a number written as another part of the page writes it
    if step_id == "naive" and mine:
        run = mine[-1]
        pace = naive_pace(run)
        here = [_mean_latency([run]), run.duration, 1 / pace if pace else None, worker_memory(run)["worker_peak_gb"]]
    elif step_id == "free" and facts:  # on a GPU the device's memory; else the worker's own, gone with its process
        here = ([facts.get("left_gb"), 0.0 if facts.get("after_gb") is not None else None] if facts.get("gpu") else
                [facts.get("after_cleanup_gb"), facts.get("held_gb")])  # the metrics' own numbers beside it
    elif step_id == "test-query" and mine:
        here = [_mean_latency(mine)]
    elif step_id == "sequential" and mine:
        sp = speedup(naive, mine)
        here = [_mean_latency(mine), sp["x"] if sp else None]
        shown[1] = times(sp["x"]) if sp and sp["x"] else None
    elif step_id == "concurrent" and (c := concurrency(mine, naive)) is not None:
        here = [c["wall"], c["latency"], c["tput"], c["would"][0] if c["would"] else None]
    elif step_id == "tuning" and (t := tuned(mine)) is not None:
        here = [t["wall_b"], t["tput_b"], (t["tput_b"] / t["tput_a"] - 1) * 100]
    elif step_id == "streaming" and (sm := streamed(mine)) is not None:
        here = [sm["ttft"] * 1000, sm["total"], sm["tokens"], sm["rate"]]
    labels = [n.label for n in s.seed]
    if step_id == "naive" and mine and not worker_memory(mine[-1])["gpu"]:  # no GPU here: the worker's peak RAM
        labels[3] = mark("memory after loading (here: the worker's RAM, no GPU)")
    if step_id == "free" and facts and not facts.get("gpu"):  # no GPU: what the worker's process holds once gone
        labels = [mark("allocated after cleanup (here: the worker's RAM after del + gc)"),
                  mark("still reserved (here: once the worker exited)")]
    return [Row(label, seed_text(n), None if v is None else value_text(v, n.unit, shown=w))
            for label, n, v, w in zip(labels, s.seed, here, shown)]
