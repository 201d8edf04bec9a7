"""How `python -m engine` ends: a command that ended well exits once its threads, client
processes and atexit handlers are done and its output is flushed, without waiting for the interpreter to free every
module and object; nothing it measured is lost. A command that failed tears down as usual (a file its failed run
left open is still flushed then)."""
import os
import subprocess
import sys

from engine.results.store import RunStore

from .conftest import ROOT
from .fakes import FakeOpenAIServer
from .said import read

# `python -m engine ARGS` with one object in __main__ that says when the interpreter's teardown frees it
ENGINE_WITH_A_WITNESS = """
import runpy, sys
class Witness:
    def __del__(self):
        sys.stderr.write("torn down\\n")
witness = Witness()
sys.argv[0] = "engine"
runpy.run_module("engine", run_name="__main__", alter_sys=True)
"""


def _engine(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", ENGINE_WITH_A_WITNESS, *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def test_a_run_exits_without_the_teardown_and_keeps_all_it_measured(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # stdout a pipe, block-buffered
    env["SERVING_LAB_DB"] = str(tmp_path / "history.sqlite")
    with FakeOpenAIServer(chunk_delay_s=0.0, models=("ok",), metrics=True) as srv:
        p = _engine("run", "random-512-64", "--url", srv.base_url, "--model-name", "ok", "--input-len", "8",
                    "--output-len", "4", "--num-prompts", "6", "--concurrency", "2", "--client-processes", "2",
                    "--endpoint", "completions", env=env)
        generated = srv.generated
    assert p.returncode == 0, p.stdout + p.stderr
    assert "torn down" not in p.stderr  # it did not wait on the interpreter's teardown
    run_id = p.stdout.split("saved as run ")[1].split()[0]  # the last lines reached the pipe
    assert p.stdout.rstrip().endswith(f"saved as run {run_id} (python -m engine report {run_id} -o report.html)")
    run = RunStore(tmp_path / "history.sqlite").load(run_id)
    assert run.summary.completed == 6 and run.extra.load_client.workers == 2
    client = run.extra.token_count.client
    assert client == 24 and run.extra.token_count.server == client <= generated  # the server's view was read


def test_a_failed_command_still_tears_down(tmp_path):
    env = {**os.environ, "SERVING_LAB_DB": str(tmp_path / "history.sqlite")}
    p = _engine("run", "random-512-64", "--url", "http://127.0.0.1:9", "--client-processes", "0", env=env)
    assert p.returncode == 2
    assert p.stderr.startswith("error: ") and "torn down" in p.stderr, p.stderr
    assert read("--client-processes {n} is not a number of processes: give 1 or more, or leave it out to let the load "
                "choose.", p.stderr) == {"n": "0"}, p.stderr
