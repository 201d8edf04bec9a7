"""Shared fixtures. One real vLLM (CPU build) server on the embedded model per test session.

Set SERVING_LAB_TEST_URL (and SERVING_LAB_TEST_MODEL) to reuse a server you already run while
iterating; CI always starts its own."""
from __future__ import annotations

import os
import socket
from pathlib import Path
from types import SimpleNamespace

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session", autouse=True)
def isolated_runtime(tmp_path_factory):
    """Server records and logs of the tests live apart from the user's (models stay shared)."""
    d = tmp_path_factory.mktemp("runtime")
    os.environ["SERVING_LAB_RUNTIME"] = str(d)
    return d


@pytest.fixture(scope="session")
def embedded_model():
    from engine import models

    return models.embedded()


@pytest.fixture(scope="session")
def server_config(embedded_model):
    from engine.config import ServerConfig

    return ServerConfig(
        model=embedded_model.path, served_model_name="smol", max_model_len=2048, cpu_kvcache_gib=1.0,
        port=free_port(),
    )


@pytest.fixture(scope="session")
def vllm_server(server_config):
    """A ready server: SimpleNamespace(base_url, model, server (VLLMServer or None), config)."""
    url = os.environ.get("SERVING_LAB_TEST_URL")
    if url:
        yield SimpleNamespace(base_url=url, model=os.environ.get("SERVING_LAB_TEST_MODEL", "smol"), server=None,
                              config=None)
        return
    from engine.server import VLLMServer

    srv = VLLMServer(port=server_config.port)
    srv.start(server_config)
    try:
        srv.wait_ready(timeout_s=900)
        yield SimpleNamespace(base_url=server_config.base_url, model=server_config.model_name, server=srv,
                              config=server_config)
    finally:
        srv.stop()


ROOT = Path(__file__).resolve().parent.parent
