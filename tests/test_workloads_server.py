"""The workload kinds against the real vLLM (CPU) server, through engine.runs.Runner as the app and the CLI
run a scenario: a multi-turn chat (each turn's prompt holds the history the server really answered) and a
dataset (exactly the file's prompts sent, the workload recorded, not the file)."""
from __future__ import annotations

from dataclasses import replace

import pytest

from engine.measure.judge import turns
from engine.measure.workloads import scenarios, tokens
from engine.runs import Runner, Target

pytestmark = pytest.mark.server


@pytest.fixture(scope="module")
def target(vllm_server):
    return Target.at(vllm_server.base_url, vllm_server.model)


def test_a_multi_turn_and_a_dataset_workload_run_through_runner(target, embedded_model):
    saved = []
    runner = Runner(lambda r: saved.append(r) or r)
    tok = tokens.for_model(embedded_model.path)

    chat = scenarios.get("multi-turn").load_spec(tokens=tok, max_tokens=16)
    chat = replace(chat, conversations=chat.conversations[:3], prompts=chat.prompts[:3], concurrency=3)
    run = runner.load(chat, target)
    recs = sorted(run.measured, key=lambda r: r.index)
    assert len(recs) == 9 and all(r.ok for r in recs), [r.error for r in recs if not r.ok]
    for c in range(3):
        mine = [r for r in recs if r.conversation == c]
        assert [r.turn for r in mine] == [0, 1, 2]
        # each turn sends the whole history: the earlier questions and the replies the server gave
        assert mine[0].prompt_tokens < mine[1].prompt_tokens < mine[2].prompt_tokens
        grown = mine[1].prompt_tokens - mine[0].prompt_tokens
        assert grown >= tok.count(mine[0].output_text) + tok.count(mine[1].prompt)
    assert [t.turn for t in turns.by_turn(run.records)] == [0, 1, 2]
    assert run.load.workload["kind"] == "multi-turn" and run.load.workload["conversations"] == 8

    data = b"".join(b'{"prompt": "%s", "output_tokens": %d}\n' % (p.encode(), k) for p, k in
                    (("Name a colour.", 5), ("Count to three.", 9), ("Say hello in Korean.", 7)))
    ds = scenarios.get("dataset-chat").load_spec(tokens=tok, data=data, concurrency=2)
    run = runner.load(ds, target)
    recs = sorted(run.measured, key=lambda r: r.index)
    assert [r.prompt for r in recs] == ["Name a colour.", "Count to three.", "Say hello in Korean."]
    assert [r.output_tokens for r in recs] == [5, 9, 7]  # max_tokens + ignore_eos: each row's own length
    w = run.load.workload
    assert w["rows"] == 3 and len(w["sha256"]) == 64 and "prompts" not in w
    assert [r.id for r in saved] == [saved[0].id, run.id]


def test_synthetic_lengths_are_exact_on_the_server_and_a_trace_replays_on_its_clock(target, embedded_model):
    from engine.measure.workloads import kinds, lengths, traces

    runner = Runner(lambda r: r)
    tok = tokens.for_model(embedded_model.path)
    plan = lengths.plan(6, lengths.Lengths("uniform", low=20, high=300), lengths.Lengths("uniform", low=3, high=12),
                        seed=4, tokens=tok)
    spec = plan.apply(scenarios.get("random-512-64").load_spec(tokens=tokens.estimated(), endpoint="completions"))
    run = runner.load(spec, target)
    recs = sorted(run.measured, key=lambda r: r.index)
    assert all(r.ok for r in recs), [r.error for r in recs if not r.ok]
    # the server's own counts: every prompt exactly its drawn length, every answer exactly its own (ignore_eos)
    assert [r.prompt_tokens for r in recs] == plan.input_tokens
    assert [r.output_tokens for r in recs] == plan.max_tokens_each

    tr = traces.parse(kinds.example("tiny-trace.jsonl"), "tiny-trace.jsonl")
    replay = traces.plan(tr, time_scale=0.25, tokens=tok, n=12)
    run = runner.load(replay.apply(scenarios.get("trace-tiny").load_spec(tokens=tok)), target)
    recs = sorted(run.measured, key=lambda r: r.index)
    assert all(r.ok for r in recs), [r.error for r in recs if not r.ok]
    assert [r.planned_time for r in recs] == pytest.approx([r.at_s * 0.25 for r in tr.rows[:12]])
    assert all(r.send_time >= r.planned_time for r in recs)
    assert [r.output_tokens for r in recs] == [r.output_tokens for r in tr.rows[:12]]
    assert run.extra.lateness.planned_sends == 12 and run.extra.lateness.late_sends is not None
    assert run.load.workload["kind"] == "trace" and run.load.workload["time_scale"] == 0.25
