"""`engine run --client-processes N`: the load sent from N client processes, every planned request sent once."""
import subprocess
import sys

from .conftest import ROOT, cli_in_process
from .fakes import FakeOpenAIServer
from .said import read


def test_a_run_split_over_two_client_processes_sends_exactly_the_planned_requests():
    with FakeOpenAIServer(chunk_delay_s=0.0, models=("ok",)) as srv:
        p = subprocess.run([sys.executable, "-m", "engine", "run", "random-512-64", "--url", srv.base_url,
                            "--model-name", "ok", "--input-len", "8", "--output-len", "4", "--num-prompts", "12",
                            "--concurrency", "4", "--client-processes", "2", "--endpoint", "completions"],
                           cwd=ROOT, capture_output=True, text=True, timeout=300)
        bodies = list(srv.bodies)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "2 client process(es)" in p.stdout and "requests ok / failed   12 / 0" in p.stdout
    assert len(bodies) == 12 and len({b["prompt"] for b in bodies}) == 12  # each prompt once, none twice


def test_no_client_processes_is_one_sentence():
    p = cli_in_process("run", "random-512-64", "--url", "http://127.0.0.1:9", "--client-processes", "0")
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.startswith("error: ") and p.stderr.count("\n") == 1, p.stderr
    assert read("--client-processes {n} is not a number of processes: give 1 or more, or leave it out to let the load "
                "choose.", p.stderr) == {"n": "0"}, p.stderr
