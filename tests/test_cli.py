"""The headless CLI and the Lab facade against the real vLLM server: what a GPU box or a script runs."""
import json
import subprocess
import sys
import time

import pytest

from .conftest import ROOT, cli_in_process
from .said import parts, read, values

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


def test_lab_sweep_job_saves_each_level(vllm_server, lab_settings):
    from engine.lab import Lab
    from engine.measure.workloads.scenarios import SCENARIOS

    if vllm_server.server is None:
        pytest.skip("SERVING_LAB_TEST_URL points at an outside server: the Lab has nothing to adopt")
    lab = Lab(lab_settings, port=vllm_server.port)  # a second app process would adopt the running server the same way
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
USAGE = "usage"  # argparse's own usage error; any other entry is our "error: <sentence>" as (message id, values)
ALREADY_RUNNING = ("{flag} sets up a server the app starts, but --url points at one already running, which keeps its "
                   "own settings: leave {flag} out, or leave --url out to start a server.")
ON_A_GPU = ("{flag} applies to a GPU, and vLLM runs on this machine's CPU: leave it out (size the CPU's KV cache with "
            "--kv-cache-gib).")
NO_FOLDER = "The folder {folder} does not exist: create it first, or write to a folder that does."
A_FOLDER = "{path} is a folder: give a file name in it, e.g. {example}."
NOT_APPLY = ("The {name} scenario {how}, so {flag} does not apply: leave it out, or run the sweep scenario to "
             "choose the requests in flight.")
AT_ONCE, ONE_AFTER, AT_RANDOM = ("sends all its requests at once", "sends its requests one after another",
                                 "sends its requests at random times at a set rate")
WHOLE = "{what} must be a whole number from {lo} to {hi}, not {v}."
TOP, LEVEL, MAX_TOKENS = "The sweep's top level (requests in flight)", "Each sweep level (requests in flight)", \
    "Max tokens per answer"
LEVELS = "The sweep levels '{text}' are not a comma-separated list of whole numbers, e.g. 1,2,4,8."
OVER = "Max tokens per answer ({n}) is more than {of} ({limit} tokens): ask for {limit} or fewer{fix}."
SLO = "The {name} limit must be a number of milliseconds above 0, not {value}."
NOT_AN_ADDRESS = "'{url}' is not a server address: give one like http://127.0.0.1:8000 (http or https)."
TOO_SMALL = "max-model-len {max_model_len} is too small: use at least a few hundred tokens."
SEQS = ("max-num-seqs {max_num_seqs} is outside 1 to {limit:,}: it is how many requests are decoded together (vLLM's "
        "default is 256 on a GPU).")
PORT = "Port {port} is not a valid port: pick a number between 1024 and 65535."
NO_MODEL = "Model folder {folder} does not exist: check the path, or pick the embedded default model."
NOTHING_ANSWERS = ("Nothing answers at {url} ({why}): check the address and port, and that the server is running and "
                   "reachable from this machine.")
NOT_JSON = ("The file is not valid JSON ({why} at line {line}, column {column}): export it again from Serving Lab or "
            "vllm bench serve.")
BAD_ARGV = [
    # requests in flight: refused where the scenario would ignore it, bounded where it applies
    (["run", "concurrent-10", "--concurrency", "0"],
     (NOT_APPLY, {"name": "concurrent-10", "how": AT_ONCE, "flag": "--concurrency"})),
    (["run", "concurrent-10", "--concurrency", "100000"],
     (NOT_APPLY, {"name": "concurrent-10", "flag": "--concurrency"})),
    (["run", "vllm-5-sequential", "--concurrency", "4"],
     (NOT_APPLY, {"name": "vllm-5-sequential", "how": ONE_AFTER, "flag": "--concurrency"})),
    (["run", "sustained", "--concurrency", "4"],
     (NOT_APPLY, {"name": "sustained", "how": AT_RANDOM, "flag": "--concurrency"})),
    (["run", "sweep", "--url", DEAD, "--concurrency", "0"], (WHOLE, {"what": TOP, "lo": "1", "hi": "1024", "v": "0"})),
    (["run", "sweep", "--url", DEAD, "--concurrency", "-4"], (WHOLE, {"what": TOP, "v": "-4"})),
    (["run", "sweep", "--url", DEAD, "--concurrency", "100000"], (WHOLE, {"what": TOP, "hi": "1024", "v": "100000"})),
    (["run", "sweep", "--concurrency", "four"], USAGE),
    # sweep levels
    (["run", "sweep", "--url", DEAD, "--levels", "1,x,4"], (LEVELS, {"text": "1,x,4"})),
    (["run", "sweep", "--url", DEAD, "--levels", ""], (LEVELS, {"text": ""})),
    (["run", "sweep", "--url", DEAD, "--levels", "1;2"], (LEVELS, {"text": "1;2"})),
    (["run", "sweep", "--url", DEAD, "--levels", "0,2"], (WHOLE, {"what": LEVEL, "lo": "1", "v": "0"})),
    (["run", "sweep", "--url", DEAD, "--levels", "1,-2"], (WHOLE, {"what": LEVEL, "v": "-2"})),
    (["run", "sweep", "--url", DEAD, "--levels", "1,100000"], (WHOLE, {"what": LEVEL, "hi": "1024", "v": "100000"})),
    (["run", "sweep", "--url", DEAD, "--levels", "1,2", "--concurrency", "4"],
     ("--levels and --concurrency both choose the sweep's levels: give only one of them.", {})),
    (["run", "concurrent-10", "--levels", "1,2"], ("The {name} scenario {how}, so {flag} does not apply: leave it out, "
                                                   "or run the sweep scenario to choose the requests in flight.",
                                                   {"name": "concurrent-10", "flag": "--levels"})),
    # max tokens
    (["run", "concurrent-10", "--url", DEAD, "--max-tokens", "0"], (WHOLE, {"what": MAX_TOKENS, "lo": "1", "v": "0"})),
    (["run", "concurrent-10", "--url", DEAD, "--max-tokens", "-5"], (WHOLE, {"what": MAX_TOKENS, "v": "-5"})),
    (["run", "concurrent-10", "--url", DEAD, "--max-tokens", "10000000"],
     (WHOLE, {"what": MAX_TOKENS, "hi": "1000000", "v": "10000000"})),
    (["run", "concurrent-10", "--max-tokens", "many"], USAGE),
    (["run", "naive-5", "--max-tokens", "100000"],
     (OVER, {"n": "100000", "of": "this model's context length", "fix": ""})),
    (["run", "tuning", "--max-tokens", "1000"],
     (OVER, {"n": "1000", "of": "the max-model-len the server starts with", "limit": "512"})),
    (["run", "concurrent-10", "--max-model-len", "1024", "--max-tokens", "3000"],
     (OVER, {"n": "3000", "limit": "1024", "fix": ", or give a longer --max-model-len"})),
    # SLO limits (checked before anything is sent)
    (["run", "concurrent-10", "--url", DEAD, "--slo-ttft-ms", "0"], (SLO, {"name": "TTFT", "value": "0.0"})),
    (["run", "sweep", "--url", DEAD, "--slo-tpot-ms", "-5"], (SLO, {"name": "TPOT", "value": "-5.0"})),
    (["run", "sweep", "--url", DEAD, "--slo-ttft-ms", "nan"], (SLO, {"name": "TTFT", "value": "nan"})),
    (["run", "sweep", "--slo-tpot-ms", "fast"], USAGE),
    # scenarios and URLs
    (["run", "no-such-thing"], ("There is no scenario '{name}': pick one of {names}.", {"name": "no-such-thing"})),
    (["run", "naive-5", "--url", DEAD],
     ("The naive scenario runs transformers itself, with no server: leave --url out.", {})),
    (["run", "tuning", "--url", DEAD], ("The tuning scenario restarts the server with each setting: leave --url out.",
                                        {})),
    (["run", "concurrent-10", "--url", DEAD], (NOTHING_ANSWERS, {"url": DEAD})),
    (["run", "concurrent-10", "--url", "localhost:9000"], (NOT_AN_ADDRESS, {"url": "localhost:9000"})),
    (["run", "concurrent-10", "--url", "http://[::1"], (NOT_AN_ADDRESS, {"url": "http://[::1"})),
    (["run", "concurrent-10", "--url", "http://127.0.0.1:99999"], (NOT_AN_ADDRESS, {"url": "http://127.0.0.1:99999"})),
    (["run", "concurrent-10", "--url", "ftp://127.0.0.1:9000"], (NOT_AN_ADDRESS, {"url": "ftp://127.0.0.1:9000"})),
    (["run", "concurrent-10", "--url", DEAD, "--max-model-len", "512"], (ALREADY_RUNNING, {"flag": "--max-model-len"})),
    (["run", "concurrent-10", "--url", DEAD, "--model", "embedded"], (ALREADY_RUNNING, {"flag": "--model"})),
    (["run", "concurrent-10", "--model-name", "x"], ("--model-name names the model of the server at --url: leave it "
                                                     "out, the app names the model of a server it starts.", {})),
    # server options (checked before anything starts)
    (["run", "concurrent-10", "--max-model-len", "0"], (TOO_SMALL, {"max_model_len": "0"})),
    (["run", "concurrent-10", "--max-model-len", "-1"], (TOO_SMALL, {"max_model_len": "-1"})),
    (["run", "concurrent-10", "--max-model-len", "100000000"],
     ("max-model-len {max_model_len} is above this model's limit of {limit} tokens: lower it to {limit} or less.",
      {"max_model_len": "100000000"})),
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
    (["cluster", "--head", "127.0.0.1", "--nodes", "2", "--gpus-per-node", "8"],
     ("{head} is this machine's own loopback address, which the other machines cannot reach: give the head's address "
      "on the network.", {"head": "127.0.0.1"})),
    (["cluster", "--head", "10.0.0.1", "--nodes", "0", "--gpus-per-node", "8"],
     ("{nodes} machines is outside 1 to {most}.", {"nodes": "0", "most": "64"})),
    (["cluster", "--head", "10.0.0.1", "--nodes", "2"], USAGE),
    (["run", "concurrent-10", "--max-num-seqs", "0"], (SEQS, {"max_num_seqs": "0", "limit": "4,096"})),
    (["run", "concurrent-10", "--max-num-seqs", "-3"], (SEQS, {"max_num_seqs": "-3"})),
    (["run", "concurrent-10", "--port", "0"], (PORT, {"port": "0"})),
    (["run", "concurrent-10", "--port", "70000"], (PORT, {"port": "70000"})),
    (["run", "concurrent-10", "--dtype", "float8"], ("dtype '{dtype}' is not one of {choices}.", {"dtype": "float8"})),
    (["run", "concurrent-10", "--extra=--port 5"],
     ("The extra flag {flag} is not accepted here: {why}.", {"flag": "--port"})),
    (["run", "concurrent-10", '--extra="unclosed'],
     ("The extra flags could not be read ({error}): check the quotes.", {})),
    (["run", "concurrent-10", "--model", "/no/such/model"], (NO_MODEL, {"folder": "/no/such/model"})),
    (["run", "concurrent-10", "--url", DEAD, "--detach"], ("--detach leaves running a server this command starts, "
                                                           "and with --url it starts none: leave --detach out.", {})),
    (["run", "naive-5", "--detach"], ("The naive scenario starts no server to leave running: leave --detach out.", {})),
    (["serve", "--port", "-1"], (PORT, {"port": "-1"})),
    (["serve", "--max-model-len", "0"], (TOO_SMALL, {"max_model_len": "0"})),
    (["serve", "--model", "/no/such/model"], (NO_MODEL, {"folder": "/no/such/model"})),
    (["status", "--port", "0"], (PORT, {"port": "0"})),
    (["stop", "--port", "70000"], (PORT, {"port": "70000"})),
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
    (["import", "/no/such/file.json"], ("There is no file {path}: check the path.", {"path": "/no/such/file.json"})),
    (["import", "{tmp}"], ("{path} is not a file: give the JSON file Serving Lab or vllm bench serve wrote.",
                           {"path": "{tmp}"})),
    (["import", "{tmp}/not-json.json"], (NOT_JSON, {"line": "1", "column": "3"})),
    ([], USAGE),
    (["bogus"], USAGE),
]


@pytest.mark.parametrize("argv, says", BAD_ARGV,
                         ids=[" ".join(a).replace(DEAD, "DEAD") or "(nothing)" for a, _ in BAD_ARGV])
def test_a_bad_argument_is_one_sentence_never_a_traceback(argv, says, tmp_path, lab_settings):
    from engine.results.store import RunStore

    (tmp_path / "not-json.json").write_text("{ this is not json")
    if argv[:1] == ["export"]:  # a history with runs, so the export reaches its file, whatever ran before
        RunStore(lab_settings.db).import_examples()
    saved = len(RunStore(lab_settings.db))
    p = cli_in_process(*[a.replace("{tmp}", str(tmp_path)) for a in argv])
    out = p.stdout + p.stderr
    assert p.returncode != 0 and "Traceback" not in out, out
    assert len(RunStore(lab_settings.db)) == saved  # nothing run, nothing recorded as given
    if says == USAGE:
        assert p.returncode == 2 and "error:" in p.stderr.splitlines()[-1]
        return
    assert p.returncode == 2 and p.stdout == "", out  # refused before anything was started or sent
    line, = p.stderr.splitlines()
    assert line.startswith("error: ") and line.endswith("."), line
    if says is not None:  # a sentence read by its message id, with the values it shows
        template, shown = says
        found = read(template, line)
        assert found is not None and {k: found[k] for k in shown} == {
            k: v.replace("{tmp}", str(tmp_path)) for k, v in shown.items()}, (found, line)


def test_a_file_that_cannot_be_written_after_a_run_keeps_the_runs(vllm_server, tmp_path, lab_settings):
    """--json is checked before the run; should writing still fail, the runs are already saved and the
    sentence says where they are."""
    from engine.results.store import RunStore

    saved = len(RunStore(lab_settings.db))
    p = cli("run", "vllm-5-sequential", "--url", vllm_server.base_url, "--max-tokens", "4", "--json", "/proc/x.json")
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert read("Could not write {path} ({why}); the runs are saved in the history (python -m engine export --out "
                "FILE): pick a folder that exists and that you may write to.", p.stderr)["path"] == "/proc/x.json"
    assert len(RunStore(lab_settings.db)) == saved + 1


@pytest.mark.parametrize("extra, says", [
    (["--max-tokens", "{over}"], (OVER, {"n": "{over}", "of": "the running server's max-model-len", "limit": "{mml}",
                                         "fix": ", or restart the server with a longer max-model-len"})),
    (["--model-name", "nope"], ("The server at {url} serves no model named '{model}': pass --model-name {first}.",
                                {"model": "nope", "first": "{model}"})),
    (["--max-model-len", "512"], (ALREADY_RUNNING, {"flag": "--max-model-len"})),
])
def test_options_the_running_server_would_refuse_are_refused_first(vllm_server, extra, says, lab_settings):
    from engine.results.store import RunStore
    from engine.serving import endpoint

    mml = min(n for n in endpoint.discover(vllm_server.base_url).models.values() if n is not None)
    fill = dict(over=mml + 1, mml=mml, model=vllm_server.model)
    saved = len(RunStore(lab_settings.db))
    p = cli("run", "concurrent-10", "--url", vllm_server.base_url, *[a.format(**fill) for a in extra])
    assert p.returncode == 2 and p.stdout == "" and "Traceback" not in p.stderr
    assert len(p.stderr.splitlines()) == 1, p.stderr
    template, shown = says
    found = read(template, p.stderr)
    assert found is not None and {k: found[k] for k in shown} == {
        k: v.format(**fill) for k, v in shown.items()}, (found, p.stderr)
    assert len(RunStore(lab_settings.db)) == saved


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
    causes = [s for _, s in failures.failure_causes(run.records)]
    assert [x.strip() for x in lines[2:4]] == causes
    assert [(parts(s)["what"], values(s)["who"]["n"]) for s in causes] == [
        ("found nothing listening at {url}", 2), ("was cut off mid-answer when the server closed the connection", 1)]
