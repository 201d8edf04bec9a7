"""Counts that add up on a real vLLM: a multi-turn chat whose third turn outgrows the server's
max-model-len (2048: the session server's) gets vLLM's own 400 there; the turn after is never sent, and the
summary says the refused and the never sent apart, adding up to the requests planned."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from .conftest import ROOT

pytestmark = pytest.mark.server


def test_a_chat_that_outgrows_max_model_len_counts_its_never_sent_apart(vllm_server, tmp_path):
    long_turn = " ".join(["hello"] * 750)  # ~750 tokens: the third turn's history passes 2048
    f = tmp_path / "long-chats.jsonl"
    f.write_text("".join(json.dumps({"conversations": [{"from": "human", "value": f"{k} {long_turn}"}
                                                       for k in range(4)]}) + "\n" for _ in range(2)))
    p = subprocess.run([sys.executable, "-m", "engine", "run", "multi-turn", "--url", vllm_server.base_url,
                        "--dataset", str(f), "--turns", "4", "--num-prompts", "2", "--max-tokens", "8"], cwd=ROOT,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    out = p.stdout
    assert "requests ok / failed   4 / 2, 2 never sent (8 planned)" in out, out
    refused = next(line.strip() for line in out.splitlines() if "were refused" in line)
    assert refused.startswith("2 of 8 requests were refused"), out
    assert "2 of 8 requests were never sent because an earlier turn of their conversation failed" in out, out
