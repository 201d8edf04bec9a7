"""The HTML report of a workload run states what it sent as the run recorded it: the kind and the
file's name, its rows, the length summary and the file's hash (never the file), in the report's language; a
run of the lab's own prompts has no such line."""
from __future__ import annotations

import html
import json
import re

from engine.figures.report import build_report
from engine.measure.workloads import scenarios
from engine.measure.workloads.defaults import workload_plan

from .said import reads
from .test_store import make_run


def workload_run(tmp_path):
    rows = [{"prompt": f"Question {i}: " + "word " * (i * 10), "output_tokens": 20 + i} for i in range(7)]
    data = "".join(json.dumps(r) + "\n" for r in rows).encode()
    plan = workload_plan({"kind": "dataset", "file": "my-traffic.jsonl", "n": 5, "how": "first"}, data)
    run = make_run(1_764_500_000.0, "my traffic")
    run.load.workload = plan.summary
    return run, plan


def text_of(report: str) -> str:
    visible = re.sub(r"<(script|style)\b.*?</\1>", " ", report, flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", " ", visible))


def test_a_dataset_runs_report_states_its_kind_file_rows_lengths_and_hash(tmp_path):
    run, plan = workload_run(tmp_path)
    text = re.sub(r"\s+", " ", text_of(build_report([run], "en")))
    s = plan.summary
    assert "Workload" in text and "dataset · my-traffic.jsonl" in text
    assert "5 of its 7 rows sent" in text
    i, o = s["input_tokens"], s["output_tokens"]
    lengths = reads("{what}: median {median:,.0f} tokens, 99th percentile {p99:,.0f}, longest {max:,.0f}", text)
    assert [(x["median"], x["p99"], x["max"]) for x in lengths] == [  # the prompts', then the answers'
        tuple(f"{d[k]:,.0f}" for k in ("median", "p99", "max")) for d in (i, o)], lengths
    assert f"file sha256 {s['sha256']}" in text
    assert "word word word" not in text  # the prompts themselves are not the workload's record


def test_it_is_said_in_korean_too(tmp_path):
    run, _ = workload_run(tmp_path)
    text = text_of(build_report([run], "ko"))
    assert "데이터셋 · my-traffic.jsonl" in text and "7개 행 중 5개" in text


def test_a_multi_turn_run_says_its_conversations_and_a_lab_run_says_no_workload():
    spec = scenarios.get("multi-turn").load_spec()
    run = make_run(1_764_500_000.0, "chats")
    run.load.workload = spec.workload
    text = text_of(build_report([run], "en"))
    assert "multi-turn · conversations.json" in text and "8 conversations × 3 turns (24 requests)" in text
    assert "first turns: median" in text
    assert "Workload" not in text_of(build_report([make_run(1_764_500_000.0, "lab")], "en"))
