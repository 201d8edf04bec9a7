"""The headless CLI and the Lab facade against the real vLLM server: what a GPU box or a script runs."""
import json
import subprocess
import sys
import time

import pytest

from .conftest import ROOT

pytestmark = pytest.mark.server


def cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "engine", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def test_run_a_scenario_against_a_url_saves_and_writes_json(vllm_server, tmp_path):
    out = tmp_path / "c10.json"
    p = cli("run", "concurrent-10", "--url", vllm_server.base_url, "--max-tokens", "16", "--json", str(out))
    assert p.returncode == 0, p.stderr
    assert "requests ok / failed   10 / 0" in p.stdout
    runs = json.loads(out.read_text())
    assert len(runs) == 1 and runs[0]["completed"] == 10 and runs[0]["max_concurrency"] == 10
    assert all(0 < n <= 16 for n in runs[0]["output_lens"])
    csv = cli("export", "--format", "csv")
    assert csv.returncode == 0 and csv.stdout.count("\n") >= 11  # header + one row per request


def test_sweep_runs_one_saved_run_per_level(vllm_server):
    p = cli("run", "sweep", "--url", vllm_server.base_url, "--levels", "1,2", "--max-tokens", "8")
    assert p.returncode == 0, p.stderr
    assert p.stdout.count("== concurrency ") == 2


def test_unknown_scenario_is_one_sentence():
    p = cli("run", "no-such-thing")
    assert p.returncode == 2 and p.stderr.startswith("error: There is no scenario 'no-such-thing'")


def test_lab_sweep_job_saves_each_level(vllm_server):
    from engine.lab import Lab
    from engine.scenarios import SCENARIOS

    if vllm_server.server is None:
        pytest.skip("SERVING_LAB_TEST_URL points at an outside server: the Lab has nothing to adopt")
    lab = Lab(port=vllm_server.port)  # a second app process would adopt the running server the same way
    try:
        job = lab.run_sweep(SCENARIOS["sweep"].load_spec(max_tokens=8), [1, 2])
        deadline = time.time() + 240
        while job.active and time.time() < deadline:
            time.sleep(0.2)
        assert job.status == "done", job.error
        assert [r.extra["sweep_level"] for r in job.result] == [1, 2]
        saved = {r.id for r in lab.store.list()}
        assert {r.id for r in job.result} <= saved
        assert all(r.command.startswith("VLLM_CPU_KVCACHE_SPACE=") for r in job.result)
    finally:
        lab.shutdown()
