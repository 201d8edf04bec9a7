"""The Python behind a run (engine.measure.snippets.load): what an attendee copies into a notebook is valid,
short, never holds a key, sends what the run sent, and, against the real server, runs and prints what
it promises."""
from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from dataclasses import replace

import pytest

from engine.measure.workloads import prompts

from engine.measure.snippets import load as snippets
from engine.measure.load.spec import LoadSpec
from engine.results.records import RunResult
from engine.runs import Runner, Target
from engine.serving.config import ServerConfig

FAKE_KEY = "sk-fake-3b9f0c1e77d24a51"
URL = "http://127.0.0.1:9000"
LAB = LoadSpec(base_url=URL, model="SmolLM2-135M-Instruct", prompts=list(prompts.LAB_CONCURRENT), shape="burst",
               max_tokens=150)
SPECS = {
    "all at once": LAB,
    "N in flight": replace(LAB, shape="concurrency", concurrency=4, num_requests=20),
    "poisson": replace(LAB, shape="poisson", rate=2.0, num_requests=30, prompts=prompts.seeded_prompts(30),
                       ignore_eos=True),
    "sequential": replace(LAB, shape="sequential", prompts=list(prompts.LAB_SEQUENTIAL), max_tokens=200),
    "1024 synthetic, natural length": replace(LAB, prompts=prompts.seeded_prompts(1024), num_requests=1024,
                                              max_tokens=None),
    "completions": replace(LAB, endpoint="completions", shape="concurrency", concurrency=2),
    "one long prompt": replace(LAB, prompts=["word " * 400 + "'quoted' \"twice\"\n한국어"], num_requests=3),
}


@pytest.mark.parametrize("text", ["plain", "it's", 'say "hi"', "it's \"both\"", "back\\slash\\'", "a\\",
                                  "line\nbreak\t", "한국어로 설명해 주세요", "\\\"", "'"])
def test_a_literal_reads_back_as_the_text(text):
    code = snippets.lit(text)
    assert code.startswith('"') and ast.literal_eval(code) == text


@pytest.mark.parametrize("lang", ["en", "ko"])
@pytest.mark.parametrize("name", list(SPECS))
def test_each_load_snippet_is_python_of_at_most_30_lines(name, lang):
    code = snippets.load_code(SPECS[name], lang=lang)
    ast.parse(code)
    assert len(code.splitlines()) <= snippets.MAX_LINES, code
    spec = SPECS[name]
    assert f"N = {spec.n}" in code and '"http://127.0.0.1:9000/v1"' in code
    assert ("asyncio.gather" in code) == (spec.shape != "sequential")
    assert ("asyncio.Semaphore(" in code) == (spec.shape == "concurrency")
    assert ('extra_body={"ignore_eos": True}' in code) == spec.ignore_eos
    assert ("max_tokens=" in code) == (spec.max_tokens is not None)


def test_the_lab_prompts_are_all_written_out():
    """The lab's ten prompts fit: the snippet sends exactly what the Load test page sent."""
    for spec in (LAB, SPECS["N in flight"], SPECS["completions"]):
        code = snippets.load_code(spec)
        assert all(snippets.lit(p) in code for p in prompts.LAB_CONCURRENT), code
        assert "cycling through the first" not in code


def _chat(server: ServerConfig, **kw) -> str:
    return snippets.chat_code(server, prompts.LAB_STREAM, max_tokens=300, temperature=0.7, **kw)


def test_the_chat_snippet_streams_and_says_when_it_leaves_the_conversation_out():
    server = ServerConfig(model="/models/smol", served_model_name="smol", port=9000)
    alone, after_others = _chat(server), _chat(server, earlier_turns=True)
    for code in (alone, after_others):
        ast.parse(code)
        assert len(code.splitlines()) <= snippets.MAX_LINES
        assert "stream=True" in code and 'model="smol"' in code and snippets.lit(prompts.LAB_STREAM) in code
    assert "The last question only" in after_others and "The last question only" not in alone


def test_no_snippet_holds_the_key_it_was_given():
    """The server's key (in its ServerConfig, an aimed LoadSpec, or a stored run's config) never reaches
    the code: it reads OPENAI_API_KEY, and its comment says this server wants a key."""
    server = ServerConfig(model="/models/smol", served_model_name="smol", port=9000, api_key=FAKE_KEY)
    keyed = {name: replace(spec, api_key=FAKE_KEY) for name, spec in SPECS.items()}
    run = RunResult(kind="vllm", scenario="concurrent-10", label="run", records=[], duration=1.0, started_at=1.7e9,
                    model="smol", config=server.to_dict(), load=keyed["all at once"].as_dict())
    codes = [_chat(server), *(snippets.load_code(s) for s in keyed.values()), snippets.run_code(run)]
    for code in codes:
        assert FAKE_KEY not in code
        assert 'api_key=os.environ.get("OPENAI_API_KEY", "EMPTY")' in code
        assert "This server checks an API key" in code
    without = snippets.load_code(LAB)
    assert "accepts any key" in without and "checks an API key" not in without


def test_a_stored_run_gives_the_code_of_what_it_sent():
    spec = replace(SPECS["N in flight"], base_url="http://10.0.0.5:8123/v1", model="served-name", temperature=0.2)
    run = RunResult(kind="vllm", scenario="concurrent-4", label="run", records=[], duration=1.0, started_at=1.7e9,
                    model="served-name", load=spec.as_dict())
    stored = RunResult(**{**run.to_dict(), "records": []})  # as read back from the history
    code = snippets.run_code(stored)
    assert code == snippets.load_code(replace(spec, base_url="http://10.0.0.5:8123"))
    assert '"http://10.0.0.5:8123/v1"' in code and 'MODEL = "served-name"' in code and "temperature=0.2" in code
    assert "asyncio.Semaphore(4)" in code and "N = 20" in code
    naive = RunResult(kind="naive", scenario="naive-5", label="naive", records=[], duration=1.0, started_at=1.7e9,
                      load={"shape": "sequential", "prompts": ["p"]})
    imported = RunResult(kind="vllm", scenario="bench", label="bench", records=[], duration=1.0, started_at=1.7e9,
                         model="m", load={"shape": "burst", "num_requests": 10})  # vllm bench serve: no prompts
    assert snippets.run_code(naive) is None and snippets.run_code(imported) is None


# -- against the real server ---------------------------------------------------------------------------
def _run(code: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}  # as on an attendee's machine
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env,
                          check=False)
    assert done.returncode == 0, f"{done.stderr[-2000:]}\n--- the code ---\n{code}"
    print(done.stdout)  # shown with -rP: what an attendee would see
    return done.stdout


@pytest.mark.server
def test_each_snippet_runs_against_the_real_server(vllm_server):
    """What each page shows, for the session's server, with small answers: it exits 0 and prints its numbers.
    With ignore_eos every answer is exactly max_tokens long, so the printed total is known."""
    tokens = 8
    spec = LoadSpec(base_url=vllm_server.base_url, model=vllm_server.model, prompts=list(prompts.LAB_CONCURRENT[:3]),
                    shape="burst", max_tokens=tokens, ignore_eos=True)
    ran = Runner(save=lambda run: run).load(spec, Target.at(vllm_server.base_url))  # as the Load test page runs it
    assert ran.summary.completed == spec.n
    codes = [snippets.run_code(ran), *(snippets.load_code(s) for s in (
        replace(spec, shape="concurrency", concurrency=2, num_requests=4), replace(spec, shape="poisson", rate=20.0),
        replace(spec, endpoint="completions")))]
    for code in codes:
        n = int(re.search(r"^N = (\d+)", code, re.MULTILINE).group(1))
        out = _run(code)
        assert re.search(rf"^{n} requests in [\d.]+ s, mean latency [\d.]+ s$", out, re.MULTILINE), out
        assert re.search(rf"^Throughput: \d+ tokens/s \({n * tokens} tokens\)$", out, re.MULTILINE), out

    out = _run(snippets.load_code(replace(spec, shape="sequential", ignore_eos=False)))
    requests = re.findall(r"^Request (\d+): [\d.]+ s \(\d+ tokens\)$", out, re.MULTILINE)
    assert [int(n) for n in requests] == [1, 2, 3], out
    assert re.search(r"^Average \(vLLM\): [\d.]+ s per request$", out, re.MULTILINE), out

    server = ServerConfig(model=vllm_server.model, port=vllm_server.port)
    out = _run(snippets.chat_code(server, prompts.LAB_STREAM, max_tokens=tokens, temperature=0.7))
    assert re.search(r"^TTFT \(time to first token\): \d+ ms$", out, re.MULTILINE), out
    said = re.search(r"^Tokens generated: (\d+) in [\d.]+ s$", out, re.MULTILINE)
    assert said and 1 <= int(said.group(1)) <= tokens, out


@pytest.mark.server
def test_a_workload_run_on_the_completions_endpoint_has_code_that_runs_against_the_real_server(vllm_server):
    """Once, the code behind a workload run sent to /v1/completions was not written; run whole against the
    session's server it sends the run's requests to that endpoint, each to its length (ignore_eos)."""
    from engine.measure.workloads import kinds

    tokens = 6
    plan = kinds.plan_of({"kind": "lengths", "n": 4, "input": {"kind": "fixed", "mean": 16},
                          "output": {"kind": "fixed", "mean": tokens}, "seed": 3})
    spec = plan.apply(LoadSpec(base_url=vllm_server.base_url, model=vllm_server.model, prompts=["-"],
                               shape="concurrency", concurrency=2, endpoint="completions", temperature=0.0))
    ran = Runner(save=lambda run: run).load(spec, Target.at(vllm_server.base_url))
    assert ran.summary.completed == 4
    code = snippets.run_code(ran)
    assert code is not None and "client.completions.create(" in code and "max_tokens=LENGTHS[i]" in code, code
    out = _run(code)
    assert re.search(r"^4 requests in [\d.]+ s, mean latency [\d.]+ s$", out, re.MULTILINE), out
    assert re.search(rf"^Throughput: \d+ tokens/s \({4 * tokens} tokens\)$", out, re.MULTILINE), out
