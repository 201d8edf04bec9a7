"""The workload kinds and their known answers: datasets (a 5-row file gives exactly its 5 prompts and lengths),
length distributions (seeded, their stated mean), multi-turn chats (a 3rd turn carries the first two replies),
trace replay (time scale 0.5 halves the gaps), the client's lateness (a late send is counted), ramp-up and
gamma arrivals, and one sentence for each bad file. No server: tests/fakes.py where requests are sent."""
from __future__ import annotations

import json
import statistics
import time

import pytest

from tests.fakes import FakeOpenAIServer

from engine.errors import ConfigError, LabError
from engine.measure.judge import lateness, turns
from engine.measure.load.arrivals import offsets as poisson_offsets
from engine.measure.load.drive import measured_job, ramp_starts
from engine.measure.load.loadgen import run_load
from engine.measure.progress import Progress
from engine.measure.load.spec import LoadSpec
from engine.measure.workloads import conversations, datasets, kinds, lengths, scenarios, tokens, traces
from engine.measure.workloads.base import WorkloadError
from engine.results.records import RequestRecord, RunResult
from engine.figures.theme import caption_said
from tests.said import said, values

from tests.conftest import MODELS


@pytest.fixture(scope="module")
def tok():
    """The embedded model's tokenizer (SmolLM2's), as a served run counts with it."""
    from engine.serving import models

    return tokens.for_model(models.embedded(MODELS).path)


def spec(server, model="ok", **over) -> LoadSpec:
    base = dict(base_url=server.base_url, model=model, prompts=["hi"], max_tokens=4, timeout_s=30)
    return LoadSpec(**{**base, **over})


def one_sentence(e: BaseException) -> str:
    text = str(e)
    assert "\n" not in text and "Traceback" not in text and text.endswith("."), text
    return text


# -- datasets --------------------------------------------------------------------------------------

FIVE = [("What is a KV cache?", 12), ("Explain TTFT.", 7), ("한국어로 인사해 주세요.", 20),
        ("Write a haiku about GPUs.", 30), ("Why batch requests?", 5)]


def test_a_five_row_jsonl_gives_exactly_its_prompts_and_lengths(tok):
    data = "".join(json.dumps({"prompt": p, "output_tokens": k}, ensure_ascii=False) + "\n" for p, k in FIVE).encode()
    ds = datasets.parse(data, "five.jsonl")
    plan = datasets.plan(ds, tokens=tok)
    assert plan.prompts == [p for p, _ in FIVE]
    assert plan.max_tokens_each == [k for _, k in FIVE]
    assert plan.input_tokens == [len(tok.tokenizer.encode(p, add_special_tokens=False)) for p, _ in FIVE]
    s = plan.summary
    assert (s["kind"], s["name"], s["rows"], s["sent"]) == ("dataset", "five.jsonl", 5, 5)
    import hashlib

    assert s["sha256"] == hashlib.sha256(data).hexdigest()
    assert s["output_tokens"]["max"] == 30 and s["output_tokens"]["min"] == 5
    assert "tokenizer of SmolLM2-135M-Instruct" in s["counted"]
    sent = plan.apply(LoadSpec(base_url="http://x", model="m", prompts=["x"]))
    assert sent.n == 5 and sent.ignore_eos and [sent.tokens_for(i) for i in range(5)] == [k for _, k in FIVE]
    assert sent.as_dict()["workload"]["sha256"] == s["sha256"] and "max_tokens_each" not in sent.as_dict()


def test_the_prompt_column_is_found_among_the_usual_names_in_csv_and_json():
    csv_ds = datasets.parse(b"id,Question\n1,What is vLLM?\n2,\"Why, and how?\"\n", "q.csv")
    assert [r.prompt for r in csv_ds.rows] == ["What is vLLM?", "Why, and how?"] and csv_ds.layout == "column:Question"
    js = datasets.parse(json.dumps([{"text": "a"}, {"text": "b"}]).encode(), "t.json")
    assert [r.prompt for r in js.rows] == ["a", "b"]
    assert [r.prompt for r in datasets.parse(b'{"data": ["x", "y"]}', "s.json").rows] == ["x", "y"]


def test_sharegpt_and_openai_messages_send_the_first_human_turn_and_can_take_the_replys_length(tok):
    reply = "A cache of the attention keys and values of every token seen so far."
    share = [{"conversations": [{"from": "system", "value": "Be brief."}, {"from": "human", "value": "What is it?"},
                                {"from": "gpt", "value": reply}, {"from": "human", "value": "And then?"}]}]
    ds = datasets.parse(json.dumps(share).encode(), "share.json")
    assert ds.layout == "sharegpt" and ds.rows[0].prompt == "What is it?"
    assert ds.rows[0].turns == ("What is it?", "And then?")
    plan = datasets.plan(ds, tokens=tok, output_from_reply=True)
    assert plan.max_tokens_each == [tok.count(reply)] and plan.summary["output_from"] == "reply"
    msgs = [{"messages": [{"role": "user", "content": "Hello?"}, {"role": "assistant", "content": "Hi."}]}]
    assert datasets.parse(json.dumps(msgs[0]).encode() + b"\n", "m.jsonl").rows[0].prompt == "Hello?"


def test_sampling_takes_the_first_n_or_a_seeded_random_n():
    ds = datasets.parse("".join(json.dumps({"prompt": f"p{i}"}) + "\n" for i in range(50)).encode(), "fifty.jsonl")
    assert [r.prompt for r in datasets.sample(ds, 3)] == ["p0", "p1", "p2"]
    a, b = datasets.sample(ds, 10, "random", seed=7), datasets.sample(ds, 10, "random", seed=7)
    assert a == b and len(set(a)) == 10 and a != datasets.sample(ds, 10, "random", seed=8)
    assert datasets.plan(ds, 10, "random", 7).summary["sampling"] == "random"


BAD_FILES = [
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "cat.png", "is a binary file"),
    (b" " * (200 * 2**20), "huge.jsonl", "is 200 MB; a dataset is read up to 64 MB"),
    ("prompt\ncafé crème\n".encode("latin-1"), "latin1.csv", "latin1.csv is not UTF-8 text (byte 11)"),
    (b'{"id": 1, "answer": "x"}\n', "nocol.jsonl", "Row 1 of nocol.jsonl has no prompt: name its column prompt, text"),
    (b'{"prompt": "a"}\n{"prompt": "b"}\n{"prompt": "' + b"x" * 2**20 + b'"}\n', "big-row.jsonl",
     "Row 3 of big-row.jsonl holds a prompt of 1,048,576 characters"),
    (json.dumps([{"conversations": [{"from": "human", "value": "hi"}]},
                 {"conversations": [{"from": "gpt", "value": "I speak first."}]}]).encode(), "nohuman.json",
     "Row 2 of nohuman.json has no human or user turn to send"),
    (b'{"prompt": "a"}\nnot json\n', "broken.jsonl", "Line 2 of broken.jsonl is not JSON"),
    (b'{"prompt": "a", "output_tokens": "lots"}\n', "len.jsonl", "Row 1 of len.jsonl gives output_tokens 'lots'"),
    (b"", "empty.jsonl", "empty.jsonl holds no rows"),
]


@pytest.mark.parametrize("data,name,says", BAD_FILES, ids=[b[1] for b in BAD_FILES])
def test_a_bad_dataset_gets_one_sentence_naming_its_first_problem(data, name, says):
    with pytest.raises(WorkloadError) as e:
        datasets.parse(data, name)
    assert isinstance(e.value, LabError) and says in one_sentence(e.value)


# -- length distributions ---------------------------------------------------------------------------

def test_a_seeded_distribution_gives_the_same_lengths_twice_and_its_stated_mean():
    import random

    normal = lengths.Lengths("normal", mean=200, stdev=50, low=1, high=1000)
    a, b = normal.draw(4000, random.Random(3)), normal.draw(4000, random.Random(3))
    assert a == b and a != normal.draw(4000, random.Random(4))
    assert abs(statistics.mean(a) - 200) < 200 * 0.03 and abs(statistics.stdev(a) - 50) < 50 * 0.05
    clipped = lengths.Lengths("normal", mean=100, stdev=80, low=60, high=140).draw(2000, random.Random(1))
    assert min(clipped) == 60 and max(clipped) == 140
    uniform = lengths.Lengths("uniform", low=10, high=20).draw(2000, random.Random(2))
    assert set(uniform) == set(range(10, 21)) and abs(statistics.mean(uniform) - 15) < 0.3
    assert lengths.Lengths("fixed", mean=77).draw(5, random.Random(0)) == [77] * 5


def test_the_chat_like_shape_is_shipped_data_with_its_source_and_a_long_tail():
    shape = lengths.shapes()["chat-like"]
    assert shape["source"] and shape["input"]["median"] > 0
    import random

    xs = lengths.chat_like("input").draw(5000, random.Random(0))
    median, mean = statistics.median(xs), statistics.mean(xs)
    assert abs(median - shape["input"]["median"]) < shape["input"]["median"] * 0.1
    assert mean > median * 1.2 and max(xs) > 5 * median  # the long tail: a mean above the median, rare long ones
    assert min(xs) >= shape["input"]["min"] and max(xs) <= shape["input"]["max"]
    p = lengths.plan(8, lengths.chat_like("input"), lengths.chat_like("output"), seed=1)
    assert p.summary["shape_source"] == shape["source"]


def test_synthetic_prompts_have_exactly_their_token_lengths_with_the_tokenizer(tok):
    p = lengths.plan(12, lengths.Lengths("uniform", low=5, high=700), lengths.Lengths("fixed", mean=33), seed=5,
                     tokens=tok)
    assert [tok.count(x) for x in p.prompts] == p.input_tokens
    import random

    assert p.input_tokens == lengths.Lengths("uniform", low=5, high=700).draw(12, random.Random(5))
    assert p.max_tokens_each == [33] * 12 and len(set(p.prompts)) == 12
    sent = p.apply(LoadSpec(base_url="http://x", model="m", prompts=["x"]))
    assert sent.ignore_eos and sent.max_tokens == 33
    assert "estimated" in lengths.plan(2, lengths.Lengths(), None).summary["counted"]


def test_the_record_states_the_distribution_asked_for_and_the_sample_that_was_sent():
    """Once, a uniform 16-64 output length was recorded with "mean": 128 (the unused default) while the
    requests' real mean was 41.65. The record states each kind's own parameters, and the drawn lengths' statistics."""
    p = lengths.plan(20, lengths.Lengths("fixed", mean=64), lengths.Lengths("uniform", low=16, high=64, side="output"),
                     seed=7)
    s = json.loads(json.dumps(p.summary))  # as the history keeps it
    assert s["outputs"] == {"kind": "uniform", "low": 16, "high": 64}
    assert s["inputs"] == {"kind": "fixed", "mean": 64}
    assert s["output_tokens"]["mean"] == pytest.approx(statistics.mean(p.output_tokens))
    assert 16 <= s["output_tokens"]["min"] and s["output_tokens"]["max"] <= 64
    # what was recorded makes the same plan again
    again = kinds.plan_of({"kind": "lengths", "n": 20, "input": s["inputs"], "output": s["outputs"], "seed": 7},
                          tokens.estimated())
    assert again.output_tokens == p.output_tokens
    normal = lengths.Lengths("normal", mean=200, stdev=50, low=1, high=400).as_dict()
    assert normal == {"kind": "normal", "mean": 200, "stdev": 50, "low": 1, "high": 400}


def test_a_bad_distribution_is_one_sentence():
    for bad in (dict(kind="zipf"), dict(kind="uniform", low=50, high=10), dict(kind="normal", stdev=-1)):
        with pytest.raises(WorkloadError) as e:
            lengths.Lengths(**bad)
        one_sentence(e.value)


# -- multi-turn chats ------------------------------------------------------------------------------

def test_a_three_turn_chats_third_request_carries_the_first_two_replies():
    plan = conversations.plan(1, 3, ["First question?", "Second?", "Third?"][:1], seed=0)
    plan.conversations = [["First question?", "Second?", "Third?"]]
    with FakeOpenAIServer() as srv:
        result = run_load(plan.apply(spec(srv, "numbered", max_tokens=3)))
        bodies = [b for b in srv.bodies if b.get("model") == "numbered"]
    recs = sorted(result.measured, key=lambda r: r.index)
    assert [r.ok for r in recs] == [True] * 3 and [(r.conversation, r.turn) for r in recs] == [(0, 0), (0, 1), (0, 2)]
    assert "r1" in recs[0].output_text and "r2" in recs[1].output_text  # the server's own replies, told apart
    assert bodies[2]["messages"] == [
        {"role": "user", "content": "First question?"}, {"role": "assistant", "content": recs[0].output_text},
        {"role": "user", "content": "Second?"}, {"role": "assistant", "content": recs[1].output_text},
        {"role": "user", "content": "Third?"}]
    by = turns.by_turn(result.records)
    assert [t.turn for t in by] == [0, 1, 2] and all(t.requests == 1 and t.median_ttft_s is not None for t in by)


def test_conversations_come_from_a_datasets_human_turns_then_follow_ups():
    ds = datasets.parse(kinds.example("conversations.json"), "conversations.json")
    plan = conversations.plan(30, 4, ds, seed=1)
    assert len(plan.conversations) == 30 and all(len(c) == 4 for c in plan.conversations)
    assert plan.conversations[0][:3] == list(ds.rows[0].turns) and plan.conversations[0][3] in conversations.FOLLOW_UPS
    assert plan.conversations[len(ds.rows)] == plan.conversations[0][:3] + [plan.conversations[len(ds.rows)][3]]
    assert plan.summary["follow_ups_added"] == 30 and plan.summary["sha256"] == ds.sha256
    sent = plan.apply(LoadSpec(base_url="http://x", model="m", prompts=["x"], concurrency=4))
    assert (sent.n, sent.units, sent.in_flight()) == (120, 30, 4)


def test_a_failed_turn_ends_its_conversation_with_the_rest_said_not_sent():
    with FakeOpenAIServer(die_after=1) as srv:
        s = spec(srv, "die", conversations=[["a", "b", "c"]], prompts=["a"], max_tokens=2)
        result = run_load(s)
    recs = sorted(result.measured, key=lambda r: r.index)
    assert recs[0].ok and not recs[1].ok
    assert recs[2].error.startswith("not sent: turn 2 of its conversation failed")


def test_a_multi_turn_chat_needs_the_chat_endpoint():
    with pytest.raises(ConfigError) as e:
        LoadSpec(base_url="http://x", model="m", prompts=["a"], conversations=[["a", "b"]], endpoint="completions")
    assert "pick the chat endpoint" in one_sentence(e.value)


# -- trace replay and lateness ----------------------------------------------------------------------

TRACE = b"".join(json.dumps(r).encode() + b"\n" for r in (
    {"timestamp": 1000, "input_length": 20, "output_length": 3, "hash_ids": [7]},
    {"timestamp": 1400, "input_length": 30, "output_length": 4, "hash_ids": [7, 8]},
    {"timestamp": 2000, "input_length": 10, "output_length": 2},
    {"timestamp": 2200, "input_length": 15, "output_length": 5},
))


def test_a_trace_at_time_scale_half_sends_at_half_the_gaps():
    tr = traces.parse(TRACE, "t.jsonl")
    assert [r.at_s for r in tr.rows] == pytest.approx([0.0, 0.4, 1.0, 1.2])
    plan = traces.plan(tr, time_scale=0.5)
    assert plan.offsets == pytest.approx([0.0, 0.2, 0.5, 0.6]) and plan.max_tokens_each == [3, 4, 2, 5]
    with FakeOpenAIServer() as srv:
        result = run_load(plan.apply(spec(srv)))
    recs = sorted(result.measured, key=lambda r: r.index)
    assert all(r.ok for r in recs) and [r.output_tokens for r in recs] == [3, 4, 2, 5]
    assert [r.planned_time for r in recs] == pytest.approx([0.0, 0.2, 0.5, 0.6])
    assert all(r.send_time >= r.planned_time for r in recs)  # never before its time
    assert result.extra.lateness.planned_sends == 4 and result.extra.lateness.late_sends is not None


def test_trace_prompts_have_their_input_lengths_and_share_their_hash_blocks(tok):
    plan = traces.plan(traces.parse(TRACE, "t.jsonl"), tokens=tok, block_tokens=16)
    assert [tok.count(p) for p in plan.prompts] == [20, 30, 10, 15]
    first, second = plan.prompts[0], plan.prompts[1]
    shared = traces._block(tok, 7, 16)
    assert first.startswith(shared) and second.startswith(shared) and first != second


def test_the_azure_csv_shape_is_read_with_its_dates():
    csv_text = ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n"
                "2023-11-16 18:15:50.9951690,396,109\n").encode()
    tr = traces.parse(csv_text, "azure.csv")
    assert tr.time_unit == "datetime" and tr.rows[1].at_s == pytest.approx(4.314579, abs=1e-5)
    assert (tr.rows[0].input_tokens, tr.rows[0].output_tokens) == (374, 44)


BAD_TRACES = [
    (b'{"timestamp": 5, "input_length": 3, "output_length": 2}\n{"timestamp": 4, "input_length": 3, '
     b'"output_length": 2}\n', "Row 2 of b.jsonl goes back in time"),
    (b'{"timestamp": 5, "input_length": 3}\n', "Row 1 of b.jsonl lacks a timestamp, an input length or an output"),
    (b'{"timestamp": 5, "input_length": 0, "output_length": 2}\n', "Row 1 of b.jsonl has an input length '0'"),
    (b'{"timestamp": "soon", "input_length": 3, "output_length": 2}\n', "Row 1 of b.jsonl has a timestamp 'soon'"),
]


@pytest.mark.parametrize("data,says", BAD_TRACES)
def test_a_bad_trace_gets_one_sentence(data, says):
    with pytest.raises(WorkloadError) as e:
        traces.parse(data, "b.jsonl")
    assert says in one_sentence(e.value)
    with pytest.raises(WorkloadError):
        traces.plan(traces.parse(TRACE, "t.jsonl"), time_scale=0)


class SlowObserver(Progress):
    """A hook that blocks the client's event loop once (a slow UI callback): the schedule's next sends are late."""

    def __init__(self) -> None:
        self.blocked = False

    def on_request_sent(self, record: RequestRecord) -> None:
        if not self.blocked and not record.warmup:
            self.blocked = True
            time.sleep(0.3)


def test_a_late_send_is_counted_and_said():
    with FakeOpenAIServer() as srv:
        s = spec(srv, shape="trace", prompts=["a", "b", "c"], offsets=[0.0, 0.05, 0.1])
        result = run_load(s, observer=SlowObserver())
    notes = result.extra
    late = notes.lateness
    assert late.planned_sends == 3 and late.late_sends >= 2 and late.p99_ms >= 150
    assert "fell behind its schedule: " in lateness.said(notes)
    on_time = lateness.of([RequestRecord(index=i, prompt="", send_time=t + 0.001, planned_time=t) for i, t in
                           enumerate((0.0, 0.5))])
    assert on_time.late == 0 and on_time.planned == 2
    closed = RunResult(kind="vllm", scenario="x", label="x", records=[], duration=1, started_at=time.time())
    assert lateness.said(closed.extra) is None  # a closed loop has no schedule to keep


def test_a_poisson_run_records_its_plan_too():
    with FakeOpenAIServer() as srv:
        result = run_load(spec(srv, shape="poisson", rate=50.0, num_requests=6, seed=3))
    planned = [r.planned_time for r in sorted(result.measured, key=lambda r: r.index)]
    assert planned == pytest.approx(poisson_offsets(6, 50.0, 3)) and result.extra.lateness.planned_sends == 6


# -- arrivals: gamma and ramp-up ---------------------------------------------------------------------

def test_burstiness_one_is_the_poisson_schedule_and_lower_is_burstier():
    def cv(b: float) -> float:
        xs = poisson_offsets(3000, 5.0, 11, burstiness=b)
        gaps = [b2 - a for a, b2 in zip([0.0] + xs, xs)]
        return statistics.stdev(gaps) / statistics.mean(gaps)

    assert cv(0.25) > 1.5 > cv(1.0) > 0.8 > cv(4.0)  # gamma's CV is 1/sqrt(shape): 2, 1, 0.5
    xs = poisson_offsets(100, 4.0, 2, burstiness=0.5)
    assert xs[-1] == pytest.approx(100 / 4.0)  # rescaled as vllm bench serve does: n/rate


def test_a_rate_ramp_rises_linearly_and_a_concurrency_ramp_starts_its_workers_in_step():
    xs = poisson_offsets(400, 20.0, 5, ramp_up_s=10.0, ramp_from=2.0)
    early = sum(1 for t in xs if t < 2.0)
    late = sum(1 for t in xs if 8.0 <= t < 10.0)
    assert late > 3 * early  # about 2-5.6/s at first, 16.4-20/s at the end
    assert ramp_starts(4, 1, 6.0) == [0.0, 2.0, 4.0, 6.0]
    s = LoadSpec(base_url="http://x", model="m", prompts=["a"], num_requests=40, concurrency=7, ramp_up_s=12.0,
                 ramp_from=2)
    every = ramp_starts(7, 2, 12.0)
    shards = [measured_job(s, lambda: None, w, k, 3).starts for k, w in enumerate((3, 2, 2))]
    assert sorted(t for part in shards for t in part) == sorted(every)
    with pytest.raises(ConfigError) as e:
        LoadSpec(base_url="http://x", model="m", prompts=["a"], shape="burst", ramp_up_s=5)
    assert said(e.value).template.startswith("A ramp-up raises the requests in flight or the Poisson rate")


def test_a_concurrency_ramp_runs_against_a_server():
    with FakeOpenAIServer() as srv:
        result = run_load(spec(srv, prompts=["a"], num_requests=12, concurrency=4, ramp_up_s=0.3, ramp_from=1))
    assert len(result.measured) == 12 and all(r.ok for r in result.measured)
    assert "1 to 4 in flight over 0.3 s" in spec(srv, num_requests=12, concurrency=4, ramp_up_s=0.3).describe()


# -- the catalogue and the records -------------------------------------------------------------------

@pytest.mark.parametrize("name", ["dataset-chat", "lengths-chat-like", "random-512-64", "multi-turn", "trace-tiny",
                                  "ramp-up", "bursty"])
def test_each_workload_kind_is_a_scenario_of_the_catalogue(name, tok):
    scn = scenarios.get(name)
    s = scn.load_spec("http://127.0.0.1:1", "m", tokens=tok)
    assert s.scenario == name and s.n >= 24
    if scn.workload:
        assert s.workload["kind"] == scn.workload["kind"] and s.workload["counted"].startswith("counted with")
    if name == "trace-tiny":
        assert s.shape == "trace" and len(s.offsets) == s.n == 40
    if name == "random-512-64":
        assert s.workload["input_tokens"]["min"] == s.workload["input_tokens"]["max"] == 512


def test_an_uploaded_file_replaces_a_scenarios_shipped_one():
    data = b'{"prompt": "only this"}\n'
    s = scenarios.get("dataset-chat").load_spec("http://x", "m", tokens=tokens.estimated(), data=data)
    assert s.prompts == ["only this"] and s.workload["sha256"] and s.workload["rows"] == 1
    with pytest.raises(WorkloadError) as e:
        kinds.example("../../README.md")
    assert "There is no example workload" in one_sentence(e.value)


def test_turns_and_planned_times_survive_the_history_and_older_records_read_back(tmp_path):
    from engine.results.store import RunStore

    recs = [RequestRecord(index=0, prompt="a", send_time=0.01, end_time=0.2, first_token_time=0.1, chunk_times=[0.1],
                          conversation=0, turn=0, planned_time=0.0),
            RequestRecord(index=1, prompt="b", send_time=0.3, end_time=0.5, first_token_time=0.4, chunk_times=[0.4],
                          conversation=0, turn=1)]
    run = RunResult(kind="vllm", scenario="multi-turn", label="x", records=recs, duration=1.0, started_at=time.time(),
                    load={"workload": {"kind": "multi-turn", "sha256": "ab"}})
    store = RunStore(tmp_path / "h.sqlite")
    store.save(run)
    back = store.load(run.id)
    assert [(r.conversation, r.turn, r.planned_time) for r in back.records] == [(0, 0, 0.0), (0, 1, None)]
    assert back.load.workload == {"kind": "multi-turn", "sha256": "ab"}
    old = RequestRecord.from_dict({"index": 0, "prompt": "p", "send_time": 0.0})
    assert (old.conversation, old.turn, old.planned_time) == (None, None, None)


def test_a_workload_run_gets_no_python_snippet_that_would_send_something_else():
    from engine.measure.snippets import load as snippets

    base = dict(kind="vllm", scenario="x", label="x", records=[], duration=1.0, started_at=time.time(), model="m")
    plain = LoadSpec(base_url="http://127.0.0.1:8000", model="m", prompts=["a", "b"], concurrency=2)
    assert snippets.run_code(RunResult(**base, load=plain.as_dict())) is not None
    for over in (dict(workload={"kind": "dataset"}), dict(ramp_up_s=5.0, ramp_from=1), dict(burstiness=0.5,
                                                                                             shape="poisson",
                                                                                             rate=2.0)):
        sent = LoadSpec(**{**dict(base_url="http://127.0.0.1:8000", model="m", prompts=["a", "b"], concurrency=2),
                           **over})
        assert snippets.run_code(RunResult(**base, load=sent.as_dict())) is None


def test_the_length_histogram_and_ttft_per_turn_draw_the_plans_and_the_records_numbers():
    from engine.figures import workloads as fw
    from engine.figures.theme import caption

    plan = lengths.plan(50, lengths.chat_like("input"), lengths.Lengths("uniform", low=4, high=40), seed=2)
    fig = fw.length_histogram(plan)
    assert list(fig.data[0].x) == plan.input_tokens and list(fig.data[1].x) == plan.max_tokens_each
    assert f"longest {max(plan.max_tokens_each)}" in caption(fig)
    recs = [RequestRecord(index=c * 2 + t, prompt="q", send_time=0.0, first_token_time=0.1 * (t + 1), end_time=1.0,
                          chunk_times=[0.1 * (t + 1)], prompt_tokens=10 + 90 * t, conversation=c, turn=t)
            for c in range(3) for t in range(2)]
    run = RunResult(kind="vllm", scenario="multi-turn", label="x", records=recs, duration=1, started_at=time.time())
    fig = fw.ttft_by_turn(run, lang="ko")
    assert list(fig.data[0].x) == [1, 2] and list(fig.data[0].y) == pytest.approx([100, 200])
    assert "2.0" in caption(fig)
    # the later turn's slower start is the verdict's, with its interval and method, never a bare ratio
    v = said(caption_said(fig)[0])
    assert v.template.startswith("{name}: {b} is higher than {a}, {effect}, beyond noise")
    assert values(v)["effect"]["ratio"] == "2.00" and values(v)["how"]["counts"] == {"n": 3}


def test_a_later_turns_ttft_within_noise_or_beside_a_disturbed_run_claims_nothing():
    from engine.figures import workloads as fw
    from engine.results.records import Beside, Disturbance, Notes

    def run(ttfts: list[tuple[float, float]], **notes):
        recs = [RequestRecord(index=c * 2 + t, prompt="q", send_time=0.0, first_token_time=pair[t], end_time=1.0,
                              chunk_times=[pair[t]], prompt_tokens=10 + 90 * t, conversation=c, turn=t)
                for c, pair in enumerate(ttfts) for t in range(2)]
        return RunResult(kind="vllm", scenario="multi-turn", label="x", records=recs, duration=1,
                         started_at=time.time(), extra=Notes(**notes))

    noisy = run([(0.10, 0.12), (0.14, 0.11), (0.12, 0.13), (0.09, 0.10)])
    assert said(caption_said(fw.ttft_by_turn(noisy))[0]).template.startswith(
        "{name}: no measurable difference on this machine")
    busy = run([(0.1, 0.2)] * 3, beside=Beside(disturbance=Disturbance(seconds=10.0, cores=2, others_cores=1.4,
                                                                        steal_cores=0.0)))
    v = said(caption_said(fw.ttft_by_turn(busy))[0])
    assert "no verdict, because the machine was disturbed" in v.template


def test_a_max_tokens_given_to_a_workload_scenario_caps_each_answer():
    s = scenarios.get("random-512-64").load_spec("http://x", "m", tokens=tokens.estimated(), max_tokens=16)
    assert s.max_tokens == 16 and set(s.max_tokens_each) == {16} and "exactly 16" in s.label
    t = scenarios.get("trace-tiny").load_spec("http://x", "m", tokens=tokens.estimated(), max_tokens=20)
    shipped = traces.parse(kinds.example("tiny-trace.jsonl"), "t").rows
    assert t.max_tokens_each == [min(20, r.output_tokens) for r in shipped]
