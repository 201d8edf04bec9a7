"""The headless CLI and the Lab facade against the real vLLM server: what a GPU box or a script runs."""
import json
import subprocess
import sys
import time

import pytest

from .conftest import ROOT, cli_in_process
from .said import read

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
    """With SLO limits each level says its goodput, and the sweep its knee: limits of a minute, which no
    answer of 8 tokens misses, leave every request good and the knee beyond the top level."""
    p = cli("run", "sweep", "--url", vllm_server.base_url, "--levels", "1,2", "--max-tokens", "8",
            "--slo-ttft-ms", "60000", "--slo-tpot-ms", "60000")
    assert p.returncode == 0, p.stderr
    assert p.stdout.count("== concurrency ") == 2
    assert [line.split(" met the SLO")[0].strip() for line in p.stdout.splitlines() if " met the SLO (" in line][:2] \
        == ["8 of 8 requests (100%)"] * 2  # max(8, 2 x level) requests a level
    knee = read("Even the most requests in flight, {users:g}, met the SLO ({slo}) for at least {target:.0%} of "
                "requests, at {total:,.0f} tok/s in total and {per_user:,.1f} tok/s per user: the knee lies further, "
                "so sweep higher to find it.", p.stdout.splitlines()[-1])
    assert knee and (knee["users"], knee["slo"]) == ("2", "TTFT ≤ 60000 ms and TPOT ≤ 60000 ms"), p.stdout


def test_unknown_scenario_is_one_sentence():
    p = cli("run", "no-such-thing")
    assert p.returncode == 2 and p.stderr.startswith("error: ") and p.stderr.count("\n") == 1, p.stderr
    assert read("There is no scenario '{name}': pick one of {names}.", p.stderr)["name"] == "no-such-thing"


def test_lab_sweep_job_saves_each_level(vllm_server):
    from engine.lab import Lab
    from engine.measure.workloads.scenarios import SCENARIOS

    if vllm_server.server is None:
        pytest.skip("SERVING_LAB_TEST_URL points at an outside server: the Lab has nothing to adopt")
    lab = Lab(port=vllm_server.port)  # a second app process would adopt the running server the same way
    try:
        job = lab.run_sweep(SCENARIOS["sweep"].load_spec(max_tokens=8), [1, 2])
        deadline = time.time() + 240
        while job.active and time.time() < deadline:
            time.sleep(0.2)
        assert job.status == "done", job.error
        assert [r.extra.sweep_level for r in job.result] == [1, 2]
        saved = {r.id for r in lab.store.list()}
        assert {r.id for r in job.result} <= saved
        assert all(r.command.startswith("VLLM_CPU_KVCACHE_SPACE=") for r in job.result)
    finally:
        lab.shutdown()


# -- every bad option is one sentence, never a traceback ------------------------------------------
def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


DEAD = f"http://127.0.0.1:{_free_port()}"  # nothing listens there
OURS, USAGE = "ours", "usage"  # our "error: <sentence>" / argparse's own usage error
ALREADY_RUNNING = ("{flag} sets up a server the app starts, but --url points at one already running, which keeps its "
                   "own settings: leave {flag} out, or leave --url out to start a server.")
ON_A_GPU = ("{flag} applies to a GPU, and vLLM runs on this machine's CPU: leave it out (size the CPU's KV cache with "
            "--kv-cache-gib).")
NO_FOLDER = "The folder {folder} does not exist: create it first, or write to a folder that does."
A_FOLDER = "{path} is a folder: give a file name in it, e.g. {example}."
BAD_ARGV = [
    # requests in flight: refused where the scenario would ignore it, bounded where it applies
    (["run", "concurrent-10", "--concurrency", "0"], "sends all its requests at once, so --concurrency does not apply"),
    (["run", "concurrent-10", "--concurrency", "100000"], "so --concurrency does not apply"),
    (["run", "vllm-5-sequential", "--concurrency", "4"], "sends its requests one after another"),
    (["run", "sustained", "--concurrency", "4"], "sends its requests at random times"),
    (["run", "sweep", "--url", DEAD, "--concurrency", "0"], "The sweep's top level (requests in flight) must be a "
                                                            "whole number from 1 to 1024, not 0."),
    (["run", "sweep", "--url", DEAD, "--concurrency", "-4"], "from 1 to 1024, not -4."),
    (["run", "sweep", "--url", DEAD, "--concurrency", "100000"], "from 1 to 1024, not 100000."),
    (["run", "sweep", "--concurrency", "four"], USAGE),
    # sweep levels
    (["run", "sweep", "--url", DEAD, "--levels", "1,x,4"], "The sweep levels '1,x,4' are not a comma-separated list"),
    (["run", "sweep", "--url", DEAD, "--levels", ""], "are not a comma-separated list of whole numbers"),
    (["run", "sweep", "--url", DEAD, "--levels", "1;2"], "are not a comma-separated list of whole numbers"),
    (["run", "sweep", "--url", DEAD, "--levels", "0,2"], "Each sweep level (requests in flight) must be a whole"),
    (["run", "sweep", "--url", DEAD, "--levels", "1,-2"], "not -2."),
    (["run", "sweep", "--url", DEAD, "--levels", "1,100000"], "not 100000."),
    (["run", "sweep", "--url", DEAD, "--levels", "1,2", "--concurrency", "4"],
     ("--levels and --concurrency both choose the sweep's levels: give only one of them.", {})),
    (["run", "concurrent-10", "--levels", "1,2"], ("The {name} scenario {how}, so {flag} does not apply: leave it out, "
                                                   "or run the sweep scenario to choose the requests in flight.",
                                                   {"name": "concurrent-10", "flag": "--levels"})),
    # max tokens
    (["run", "concurrent-10", "--url", DEAD, "--max-tokens", "0"], "Max tokens per answer must be a whole number"),
    (["run", "concurrent-10", "--url", DEAD, "--max-tokens", "-5"], "Max tokens per answer must be a whole number"),
    (["run", "concurrent-10", "--url", DEAD, "--max-tokens", "10000000"], "from 1 to 1000000, not 10000000."),
    (["run", "concurrent-10", "--max-tokens", "many"], USAGE),
    (["run", "naive-5", "--max-tokens", "100000"], "is more than this model's context length"),
    (["run", "tuning", "--max-tokens", "1000"], "is more than the max-model-len the server starts with (512 tokens)"),
    (["run", "concurrent-10", "--max-model-len", "1024", "--max-tokens", "3000"],
     "ask for 1024 or fewer, or give a longer --max-model-len."),
    # SLO limits (checked before anything is sent)
    (["run", "concurrent-10", "--url", DEAD, "--slo-ttft-ms", "0"], "The TTFT limit must be a number of milliseconds "
                                                                    "above 0, not 0.0."),
    (["run", "sweep", "--url", DEAD, "--slo-tpot-ms", "-5"], "The TPOT limit must be a number of milliseconds above "
                                                             "0, not -5.0."),
    (["run", "sweep", "--url", DEAD, "--slo-ttft-ms", "nan"], "not nan."),
    (["run", "sweep", "--slo-tpot-ms", "fast"], USAGE),
    # scenarios and URLs
    (["run", "no-such-thing"], "There is no scenario 'no-such-thing'"),
    (["run", "naive-5", "--url", DEAD],
     ("The naive scenario runs transformers itself, with no server: leave --url out.", {})),
    (["run", "tuning", "--url", DEAD], ("The tuning scenario restarts the server with each setting: leave --url out.",
                                        {})),
    (["run", "concurrent-10", "--url", DEAD], f"Nothing answers at {DEAD}"),
    (["run", "concurrent-10", "--url", "localhost:9000"], "'localhost:9000' is not a server address"),
    (["run", "concurrent-10", "--url", "http://[::1"], "is not a server address"),
    (["run", "concurrent-10", "--url", "http://127.0.0.1:99999"], "is not a server address"),
    (["run", "concurrent-10", "--url", "ftp://127.0.0.1:9000"], "is not a server address"),
    (["run", "concurrent-10", "--url", DEAD, "--max-model-len", "512"], (ALREADY_RUNNING, {"flag": "--max-model-len"})),
    (["run", "concurrent-10", "--url", DEAD, "--model", "embedded"], (ALREADY_RUNNING, {"flag": "--model"})),
    (["run", "concurrent-10", "--model-name", "x"], ("--model-name names the model of the server at --url: leave it "
                                                     "out, the app names the model of a server it starts.", {})),
    # server options (checked before anything starts)
    (["run", "concurrent-10", "--max-model-len", "0"], "max-model-len 0 is too small"),
    (["run", "concurrent-10", "--max-model-len", "-1"], "max-model-len -1 is too small"),
    (["run", "concurrent-10", "--max-model-len", "100000000"], "max-model-len 100000000 is above this model's limit"),
    (["run", "concurrent-10", "--max-model-len", "long"], USAGE),
    (["run", "tuning", "--max-model-len", "1024"], ("The tuning scenario sets {flag} itself for each configuration "
                                                    "it compares: leave {flag} out.", {"flag": "--max-model-len"})),
    (["run", "concurrent-10", "--kv-cache-gib", "0"], None),  # CPU: too small; GPU: it does not apply there
    (["run", "concurrent-10", "--kv-cache-gib", "100000"], None),
    (["run", "concurrent-10", "--gpu-memory-utilization", "0"], None),  # GPU: outside (0, 1]; CPU: does not apply
    (["run", "concurrent-10", "--gpu-memory-utilization", "5"], None),
    (["run", "concurrent-10", "--gpu-memory-utilization", "half"], USAGE),
    (["run", "concurrent-10", "--tensor-parallel-size", "0"], None),
    (["run", "concurrent-10", "--tensor-parallel-size", "1000"], None),
    (["run", "concurrent-10", "--data-parallel-size", "2"], (ON_A_GPU, {"flag": "--data-parallel-size"})),
    (["serve", "--gpus", "0,1"], (ON_A_GPU, {"flag": "--gpus"})),
    (["cluster", "--head", "127.0.0.1", "--nodes", "2", "--gpus-per-node", "8"], "loopback address"),
    (["cluster", "--head", "10.0.0.1", "--nodes", "0", "--gpus-per-node", "8"], "0 machines is outside 1 to 64"),
    (["cluster", "--head", "10.0.0.1", "--nodes", "2"], USAGE),
    (["run", "concurrent-10", "--max-num-seqs", "0"], "max-num-seqs 0 is outside 1 to 4,096"),
    (["run", "concurrent-10", "--max-num-seqs", "-3"], "max-num-seqs -3 is outside 1 to 4,096"),
    (["run", "concurrent-10", "--port", "0"], "Port 0 is not a valid port"),
    (["run", "concurrent-10", "--port", "70000"], "Port 70000 is not a valid port"),
    (["run", "concurrent-10", "--dtype", "float8"], "dtype 'float8' is not one of"),
    (["run", "concurrent-10", "--extra=--port 5"], "The extra flag --port is not accepted here"),
    (["run", "concurrent-10", '--extra="unclosed'], "The extra flags could not be read"),
    (["run", "concurrent-10", "--model", "/no/such/model"], "Model folder /no/such/model does not exist"),
    (["run", "concurrent-10", "--url", DEAD, "--detach"], ("--detach leaves running a server this command starts, "
                                                           "and with --url it starts none: leave --detach out.", {})),
    (["run", "naive-5", "--detach"], ("The naive scenario starts no server to leave running: leave --detach out.", {})),
    (["serve", "--port", "-1"], "Port -1 is not a valid port"),
    (["serve", "--max-model-len", "0"], "max-model-len 0 is too small"),
    (["serve", "--model", "/no/such/model"], "does not exist"),
    (["status", "--port", "0"], "Port 0 is not a valid port"),
    (["stop", "--port", "70000"], "Port 70000 is not a valid port"),
    (["status", "--port", "x"], USAGE),
    # files
    (["run", "concurrent-10", "--url", DEAD, "--json", "/no/such/dir/x.json"], (NO_FOLDER, {"folder": "/no/such/dir"})),
    (["run", "concurrent-10", "--url", DEAD, "--json", "{tmp}"], (A_FOLDER, {"path": "{tmp}"})),
    (["export", "--out", "/no/such/dir/x.json"], (NO_FOLDER, {"folder": "/no/such/dir"})),
    (["export", "--out", "{tmp}"], (A_FOLDER, {"path": "{tmp}", "example": "{tmp}/runs.json"})),
    (["export", "--out", "/proc/version"], ("Could not write {path} ({why}): pick a folder that exists and that you "
                                            "may write to.", {"path": "/proc/version"})),
    (["export", "no-such-run"], ("No run '{run}' in the history; it may have been deleted: leave the ids out to export "
                                 "every run.", {"run": "no-such-run"})),
    (["export", "--format", "xml"], USAGE),
    (["import", "/no/such/file.json"], "/no/such/file.json"),
    (["import", "{tmp}"], None),
    (["import", "{tmp}/not-json.json"], None),
    ([], USAGE),
    (["bogus"], USAGE),
]


@pytest.mark.parametrize("argv, says", BAD_ARGV,
                         ids=[" ".join(a).replace(DEAD, "DEAD") or "(nothing)" for a, _ in BAD_ARGV])
def test_a_bad_argument_is_one_sentence_never_a_traceback(argv, says, tmp_path):
    from engine.results.store import RunStore

    (tmp_path / "not-json.json").write_text("{ this is not json")
    if argv[:1] == ["export"]:  # a history with runs, so the export reaches its file, whatever ran before
        RunStore().import_examples()
    saved = len(RunStore())
    p = cli_in_process(*[a.replace("{tmp}", str(tmp_path)) for a in argv])
    out = p.stdout + p.stderr
    assert p.returncode != 0 and "Traceback" not in out, out
    assert len(RunStore()) == saved  # nothing run, nothing recorded as given
    if says == USAGE:
        assert p.returncode == 2 and "error:" in p.stderr.splitlines()[-1]
        return
    assert p.returncode == 2 and p.stdout == "", out  # refused before anything was started or sent
    line, = p.stderr.splitlines()
    assert line.startswith("error: ") and line.endswith("."), line
    if isinstance(says, tuple):  # a sentence read by its message id, with the values it shows
        template, shown = says
        found = read(template, line)
        assert found is not None and {k: found[k] for k in shown} == {
            k: v.replace("{tmp}", str(tmp_path)) for k, v in shown.items()}, (found, line)
    elif says:
        assert says.replace("{tmp}", str(tmp_path)) in line


def test_a_file_that_cannot_be_written_after_a_run_keeps_the_runs(vllm_server, tmp_path):
    """--json is checked before the run; should writing still fail, the runs are already saved and the
    sentence says where they are."""
    from engine.results.store import RunStore

    saved = len(RunStore())
    p = cli("run", "vllm-5-sequential", "--url", vllm_server.base_url, "--max-tokens", "4", "--json", "/proc/x.json")
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert read("Could not write {path} ({why}); the runs are saved in the history (python -m engine export --out "
                "FILE): pick a folder that exists and that you may write to.", p.stderr)["path"] == "/proc/x.json"
    assert len(RunStore()) == saved + 1


@pytest.mark.parametrize("extra, says", [
    (["--max-tokens", "{over}"], "Max tokens per answer ({over}) is more than the running server's max-model-len "
                                 "({mml} tokens): ask for {mml} or fewer, or restart the server with a longer "
                                 "max-model-len."),
    (["--model-name", "nope"], "serves no model named 'nope': pass --model-name {model}."),
    (["--max-model-len", "512"], "--max-model-len sets up a server the app starts, but --url points at one"),
])
def test_options_the_running_server_would_refuse_are_refused_first(vllm_server, extra, says):
    from engine.results.store import RunStore
    from engine.serving import endpoint

    mml = min(n for n in endpoint.discover(vllm_server.base_url).models.values() if n is not None)
    fill = dict(over=mml + 1, mml=mml, model=vllm_server.model)
    saved = len(RunStore())
    p = cli("run", "concurrent-10", "--url", vllm_server.base_url, *[a.format(**fill) for a in extra])
    assert p.returncode == 2 and p.stdout == "" and "Traceback" not in p.stderr
    assert says.format(**fill) in p.stderr and len(p.stderr.splitlines()) == 1
    assert len(RunStore()) == saved


def test_the_run_summary_counts_failed_requests_by_cause():
    """A server that dies mid-run: the CLI's summary says, under the counts, what happened to the failed ones."""
    from tests.fakes import FakeOpenAIServer

    from engine.cli.summary import summary_table
    from engine.measure.judge import failures
    from engine.measure.load.loadgen import run_load
    from engine.measure.load.spec import LoadSpec

    with FakeOpenAIServer(die_after=2) as srv:
        run = run_load(LoadSpec(base_url=srv.base_url, model="die", prompts=["hi"], num_requests=5,
                                shape="sequential", max_tokens=5, timeout_s=10, read_timeout_s=5))
    lines = summary_table(run).splitlines()
    assert lines[1] == "requests ok / failed   2 / 3"
    assert [x.strip() for x in lines[2:4]] == [s for _, s in failures.failure_causes(run.records)]
    assert "cut off mid-answer" in lines[3] and "found nothing listening" in lines[2]
