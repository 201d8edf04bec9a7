"""Saved runs as the guided lab's steps make them, for tests that draw the steps without a server."""
from __future__ import annotations

import time
from pathlib import Path

from engine.lab import Lab
from engine.measure.judge import stats
from engine.measure.judge.worker_memory import worker_memory
from engine.measure.workloads import scenarios
from engine.results.records import MemoryAt, NaiveWorker, Notes, RequestRecord, RunResult, WorkerMemory
from engine.results.store import RunStore
from engine.settings import Settings

from .conftest import free_port


def _run(scenario: str, kind: str, per_request: list[tuple[float, int]], tokens: int, *, at_once=False,
         label=None, config=None, extra: Notes | None = None) -> RunResult:
    """A saved run as the step makes it: its scenario's name at the step's budget, requests of the given
    (seconds, output tokens), one after another or all at once."""
    recs, t = [], 0.0
    for i, (secs, out) in enumerate(per_request):
        start = 0.0 if at_once else t
        recs.append(RequestRecord(index=i, prompt=f"Prompt {i}: explain how a serving engine batches requests.",
                                  send_time=start, first_token_time=start + secs / 10,
                                  chunk_times=[start + secs / 10 + k * secs * 0.9 / out for k in range(out)],
                                  end_time=start + secs, prompt_tokens=30, output_tokens=out,
                                  output_text="Seoul is the capital of South Korea." if scenario == "test-query" else
                                  "An answer."))
        t = start + secs
    duration = max(r.end_time for r in recs)
    name = label or scenarios.get(scenario).label(tokens)
    return RunResult(kind=kind, scenario=scenario, label=name, records=recs, duration=duration,
                     started_at=time.time(), config=config or {"device": "cpu", "cpu_kvcache_gib": 2},
                     summary=stats.summarize(recs, duration), extra=extra or Notes())


def seed(folder: Path, lab_settings: Settings) -> None:
    """A history with one run per step at a tenth of the budget, and the guide's session naming them (its Lab built
    with `lab_settings`)."""
    lab = Lab(lab_settings, port=free_port(), store=RunStore(folder / "history.sqlite"))
    try:
        guide = lab.guide
        guide.set_scale(0.1, token=None)
        mem = WorkerMemory(before=MemoryAt(ram_used=4_200_000_000), after_exit=MemoryAt(ram_used=4_250_000_000),
                           worker_peak_rss=840_000_000, after_cleanup=MemoryAt(rss=610_000_000), worker_exited=True)
        runs = {"naive": [_run("naive-5", "naive", [(9.0, 20)] * 5, 20, extra=Notes(naive=NaiveWorker(memory=mem)))],
                "test-query": [_run("test-query", "vllm", [(1.1, 20)], 20)],
                "sequential": [_run("vllm-5-sequential", "vllm", [(2.0, 20)] * 5, 20)],
                "concurrent": [_run("concurrent-10", "vllm", [(3.5, 15)] * 10, 15, at_once=True)],
                "tuning": [_run("tuning", "vllm", [(3.0, 10)] * 10, 10, at_once=True,
                                label="max-model-len 2048 / KV 2 GiB"),  # runs.tuning_label on a CPU
                           _run("tuning", "vllm", [(2.8, 10)] * 10, 10, at_once=True,
                                label="max-model-len 512 / KV 2 GiB")],
                "streaming": [_run("stream-300", "vllm", [(4.0, 30)], 30)]}
        for sid, rs in runs.items():
            for r in rs:
                lab.store.save(r)
            guide._state.runs[sid] = [r.id for r in rs]
        guide._state.facts["free"] = {"checked_at": time.time(), **worker_memory(runs["naive"][0]),
                                      "worker_alive": False}
        guide._state.facts["start"] = {"asked_at": time.time(), "already": False, "ready_s": 121.4}
        guide.go_to("naive", token=None)
    finally:
        lab.shutdown()
