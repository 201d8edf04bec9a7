"""The Python behind a workload run (engine.measure.snippets.workload): for a dataset, a length distribution, a
multi-turn chat and a trace it is valid Python that names the file the run sent, and, run up to its last line
(the sending), it builds the very prompts, answer lengths and conversations the run sent."""
from __future__ import annotations

import ast
import json
import os
from dataclasses import replace

import pytest

from engine.measure.snippets.load import run_code
from engine.measure.workloads import scenarios
from engine.measure.workloads.kinds import EXAMPLES
from engine.results.records import RunResult

URL = "http://10.0.0.5:8123"


def stored(spec) -> RunResult:
    """A run of `spec` as read back from the history."""
    spec = replace(spec, base_url=URL, model="served-name")
    run = RunResult(kind="vllm", scenario=spec.scenario, label="run", records=[], duration=1.0, started_at=1.7e9,
                    model="served-name", load=spec.as_dict())
    return RunResult(**{**run.to_dict(), "records": []})


def built(code: str, where) -> dict:
    """What the snippet builds before it sends (every line but the last, `asyncio.run(main())`), run in `where`."""
    body, last = code.rstrip("\n").rsplit("\n", 1)
    assert last.startswith("asyncio.run(main())")
    here = os.getcwd()
    os.chdir(where)
    try:
        ns: dict = {}
        exec(compile(body, "<snippet>", "exec"), ns)  # noqa: S102 - the code this app prints, no network reached
        return ns
    finally:
        os.chdir(here)


@pytest.fixture
def five(tmp_path):
    path = tmp_path / "five.jsonl"
    rows = [{"prompt": f"Question number {i}?", "output_tokens": 10 + i} for i in range(5)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_a_dataset_runs_code_reads_the_same_file_and_sends_its_rows(five, tmp_path):
    spec = replace(scenarios.get("dataset-chat"), workload={"kind": "dataset", "file": "five.jsonl", "n": 3,
                                                                      "how": "random", "seed": 4}
                             ).load_spec(data=five.read_bytes())
    code = run_code(stored(spec))
    ast.parse(code)
    assert 'FILE = "five.jsonl"' in code and spec.workload["sha256"][:12] in code
    assert "AsyncOpenAI" in code and f'"{URL}/v1"' in code
    ns = built(code, tmp_path)
    assert ns["PROMPTS"] == spec.prompts and ns["LENGTHS"] == spec.max_tokens_each  # those rows, their lengths


def test_a_shipped_file_is_named_where_it_lies():
    spec = scenarios.get("dataset-chat").load_spec()
    code = run_code(stored(spec))
    assert f"FILE = \"{EXAMPLES / 'chat-prompts.jsonl'}\"" in code
    assert built(code, EXAMPLES)["PROMPTS"] == spec.prompts


@pytest.mark.parametrize("name", ["lengths-chat-like", "random-512-64"])
def test_a_length_distributions_code_draws_the_same_seeded_lengths(name, tmp_path):
    spec = scenarios.get(name).load_spec()
    code = run_code(stored(spec))
    ast.parse(code)
    ns = built(code, tmp_path)
    assert ns["LENGTHS"] == spec.max_tokens_each and len(ns["PROMPTS"]) == spec.n
    assert len(set(p.split()[1] for p in ns["PROMPTS"])) == spec.n  # each prompt its own from the first words


def test_a_multi_turn_runs_code_sends_the_same_turns_with_the_history():
    spec = scenarios.get("multi-turn").load_spec()
    code = run_code(stored(spec))
    ast.parse(code)
    assert "conversations.json" in code and 'messages.append({"role": "assistant"' in code
    assert built(code, EXAMPLES)["CHATS"] == spec.conversations


def test_a_traces_code_replays_its_clock_at_the_runs_time_scale():
    spec = replace(scenarios.get("trace-tiny"), workload={"kind": "trace", "file": "tiny-trace.jsonl",
                                                                    "time_scale": 0.5}).load_spec()
    code = run_code(stored(spec))
    ast.parse(code)
    assert "tiny-trace.jsonl" in code and "SCALE = 0.5" in code
    ns = built(code, EXAMPLES)
    assert ns["AT"] == pytest.approx(spec.offsets) and ns["LENGTHS"] == spec.max_tokens_each


def test_the_comments_follow_the_viewers_language(five):
    spec = scenarios.get("multi-turn").load_spec()
    ko = run_code(stored(spec), "ko")
    assert ko != run_code(stored(spec)) and any("\uac00" <= ch <= "\ud7a3" for ch in ko)


def test_a_shared_prefix_runs_code_sends_k_prefixes_and_the_random_prefix_opens_every_prompt(tmp_path):
    spec = scenarios.get("prefix-repetition").load_spec()
    ns = built(run_code(stored(spec)), tmp_path)
    assert len(ns["PROMPTS"]) == spec.n and ns["LENGTHS"] == spec.max_tokens_each
    assert len({p.split(" Request")[0] for p in ns["PROMPTS"]}) == spec.workload["num_prefixes"]
    spec = replace(scenarios.get("random-512-64"), workload={**scenarios.get("random-512-64").workload,
                                                               "prefix_len": 64}).load_spec()
    ns = built(run_code(stored(spec)), tmp_path)
    assert all(p.startswith("Shared: word") for p in ns["PROMPTS"]) and len(set(ns["PROMPTS"])) == spec.n
