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


def _ran(code: str, where, **env) -> str:
    """The code behind a run, run whole in its own Python (against the fake its URL names): what it printed."""
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=where,
                       env={"PATH": "/usr/bin", **env})
    assert p.returncode == 0, p.stderr[-2000:] + code
    return p.stdout


def test_a_workload_run_on_completions_with_lora_modules_has_code_that_sends_them_so(tmp_path, monkeypatch):
    """Once, the code behind a workload run sent to /v1/completions with LoRA modules in turn (3 to 1) was not
    written; it sends each of its prompts to the completions endpoint naming the module the run's request named,
    with the run's header read from the environment (run against the fake, which answers any model name)."""
    from tests.fakes import FakeOpenAIServer

    with FakeOpenAIServer(models=("ok",)) as srv:
        spec = replace(scenarios.get("random-512-64").load_spec(), endpoint="completions",
                       lora_modules=["sql", "chat"], lora_weights=[3, 1], headers={"X-Team": "t"})
        code = run_code(replace_url(stored(spec), srv.base_url))
        assert code is not None
        monkeypatch.setenv("X_TEAM", "from-the-environment")
        prompts = built(code, tmp_path)["PROMPTS"]
        out = _ran(code, tmp_path, X_TEAM="from-the-environment")
        sent = sorted((b["prompt"], b["model"], b["max_tokens"]) for b in srv.bodies)
    assert sent == sorted((p, spec.model_for(i), spec.max_tokens_each[i]) for i, p in enumerate(prompts))
    assert [spec.model_for(i) for i in range(4)] == ["sql", "sql", "chat", "sql"]
    assert f"{spec.n} requests in" in out


@pytest.mark.parametrize("endpoint", ["embeddings", "rerank"])
def test_a_workload_run_on_a_pooling_endpoint_has_code_that_sends_the_same_bodies(endpoint, tmp_path):
    """Embeddings: each of the file's prompts as one input; rerank: each prompt the query, the next ones its
    documents, as the run sent them (run against the fake: the embedded model serves neither route)."""
    from tests.fakes import FakeOpenAIServer

    with FakeOpenAIServer(models=("ok",)) as srv:
        spec = replace(scenarios.get("dataset-chat").load_spec(), endpoint=endpoint)
        code = run_code(replace_url(stored(spec), srv.base_url))
        assert code is not None
        out = _ran(code, EXAMPLES)
        bodies = list(srv.bodies)
    if endpoint == "embeddings":
        assert sorted(b["input"] for b in bodies) == sorted(spec.prompts)
        assert all(b["truncate_prompt_tokens"] == -1 and "max_tokens" not in b for b in bodies)
    else:
        assert sorted((b["query"], tuple(b["documents"])) for b in bodies) == \
            sorted((p, tuple(spec.documents_for(i))) for i, p in enumerate(spec.prompts))
    assert f"{len(spec.prompts)} requests in" in out


def test_a_multi_turn_run_with_lora_modules_has_code_that_keeps_each_conversation_on_its_module():
    from tests.fakes import FakeOpenAIServer

    with FakeOpenAIServer(models=("ok",)) as srv:
        spec = replace(scenarios.get("multi-turn").load_spec(), lora_modules=["a", "b", "c"],
                       lora_assignment="random", seed=5)
        code = run_code(replace_url(stored(spec), srv.base_url))
        assert code is not None
        chats = built(code, EXAMPLES)["CHATS"]
        _ran(code, EXAMPLES)
        bodies = list(srv.bodies)
    assert len(bodies) == sum(len(c) for c in chats)
    for b in bodies:  # every turn names the module its conversation was given in the run
        k = next(k for k, chat in enumerate(chats) if chat[0] == b["messages"][0]["content"])
        assert b["model"] == spec.model_for(0, conversation=k), (k, b["model"])
    assert len({b["model"] for b in bodies}) > 1


def replace_url(run: RunResult, url: str) -> RunResult:
    run.load.base_url = url
    return run
