"""Render docs/results-h200.md's charts from the H200 runs shipped in examples/ and the telemetry in
docs/data/, with the same plotly figures the dashboard draws.

    .venv/bin/python bench/h200_report.py          # writes docs/img/h200-*.png
"""
from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine import figures  # noqa: E402
from engine.results.store import RunStore  # noqa: E402


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = RunStore(Path(tmp) / "h.sqlite")
        store.import_examples(ROOT / "examples")
        runs = [store.load(r.id) for r in store.list()]
    by = {r.scenario: r for r in runs if r.scenario != "sweep" and r.scenario != "tuning"}
    sweep = sorted((r for r in runs if r.scenario == "sweep"), key=lambda r: r.extra.sweep_level or 0)
    tuning = sorted((r for r in runs if r.scenario == "tuning"), key=lambda r: -r.config.get("max_model_len", 0))
    # the KV-cache squeeze: squeezed first, as the Tuning page shows it
    kv = sorted((r for r in runs if r.scenario == "kv-squeeze"), key=lambda r: r.extra.server.kv_cache_tokens or 0)
    tel = json.loads((ROOT / "docs/data/h200-telemetry-naive-vllm.json").read_text())
    tel["events"] = [e for e in tel["events"] if not e["label"].startswith("phase ")]  # the script's own marks
    img = ROOT / "docs" / "img"
    window = figures.time_window(tel["memory"], tel["metrics"], tel["events"])  # one time axis for both
    items = [
        (figures.latency_bars(by["naive-5"], by["vllm-5-sequential"], [by["static-batch-5"]]),
         img / "h200-latency.png"),
        (figures.concurrent_latency_bars(by["concurrent-10"]), img / "h200-concurrent-10.png"),
        (figures.request_timeline(by["concurrent-10"]), img / "h200-timeline-10.png"),
        (figures.token_timeline(by["stream-300"]), img / "h200-stream-300.png"),
        (figures.sweep_chart(sweep), img / "h200-sweep.png"),
        (figures.tuning_compare(tuning), img / "h200-tuning.png"),
        (figures.memory_chart(tel["memory"], tel["events"], title="H200 memory over the lab's sequence",
                              window=window),
         img / "h200-memory.png"),
        (figures.metrics_chart(tel["metrics"], tel["events"], window=window), img / "h200-metrics.png"),
        (figures.kv_compare(kv), img / "h200-kv.png"),
    ]
    for path in figures.to_pngs(items):
        print(path)


if __name__ == "__main__":
    main()
