"""The CLI's repeats and SLO search: `run … --repeats N` prints each run, then the median
and 95 % interval of throughput and TTFT; the summary prints the server's queue / prefill / decode and the energy;
`run slo-search` bisects to the most requests in flight that meet the SLO. Bad options are one sentence."""
import subprocess
import sys

import pytest

from .conftest import ROOT, cli_in_process

DEAD = "http://127.0.0.1:9"


def cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "engine", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.server
def test_repeats_print_an_interval_and_the_server_s_view(vllm_server):
    p = cli("run", "concurrent-10", "--url", vllm_server.base_url, "--max-tokens", "8", "--repeats", "2")
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert out.count("requests ok / failed   10 / 0") == 2 and out.count("saved as run ") == 2
    table = out.split("== 2 repeats ==", 1)[1].splitlines()
    tput = next(line for line in table if line.startswith("output throughput (tok/s)"))
    assert "median" in tput and "95 % bootstrap interval" in tput and "(2 repeats)" in tput, tput
    low, high = (float(x.replace(",", "")) for x in tput.split("interval ")[1].split(" (")[0].split("–"))
    assert low <= float(tput.split("median ")[1].split(",")[0]) <= high
    assert any(line.startswith("mean TTFT (ms)") and "95 % bootstrap interval" in line for line in table), table
    # the prefix cache between the two: emptied, or why not (vLLM serves the reset only in its dev mode)
    assert "prefix cache was emptied" in out or "did not empty its prefix cache" in out
    # each run's summary: vLLM's own phases (bucket-estimated medians, exact means) and the energy, or why none
    assert out.count("server queue / prefill / decode  p50 ") == 2, out
    assert out.count("energy                 ") == 2


@pytest.mark.server
def test_slo_search_finds_the_top_level_meets_a_loose_slo(vllm_server):
    p = cli("run", "slo-search", "--url", vllm_server.base_url, "--max-tokens", "8", "--concurrency", "2",
            "--slo-ttft-ms", "60000")
    assert p.returncode == 0, p.stderr
    assert p.stdout.count("== concurrency ") == 2  # the lowest level, then the highest
    assert p.stdout.splitlines()[-1].startswith("Even 2 requests in flight, the highest level searched, met the SLO")


@pytest.mark.parametrize("argv, says", [
    (["run", "concurrent-10", "--url", DEAD, "--repeats", "0"], "--repeats must be a whole number of at least 1"),
    (["run", "sweep", "--url", DEAD, "--repeats", "2"], "--repeats repeats one load test, and sweep is not one"),
    (["run", "concurrent-10", "--url", DEAD, "--versus", "http://127.0.0.1:10", "--repeats", "2"],
     "--repeats and --versus cannot be combined"),
    (["run", "slo-search", "--url", DEAD], "give --slo-ttft-ms and/or --slo-tpot-ms"),
    (["run", "slo-search", "--url", DEAD, "--slo-ttft-ms", "500", "--levels", "1,2"], "--levels does not apply"),
    (["run", "slo-search", "--url", DEAD, "--slo-ttft-ms", "500", "--concurrency", "0"],
     "The search's highest level (requests in flight) must be a whole number"),
])
def test_a_bad_repeat_or_search_option_is_one_sentence(argv, says):
    p = cli_in_process(*argv)
    assert p.returncode == 2 and p.stdout == "" and "Traceback" not in p.stderr, p.stderr
    line, = p.stderr.splitlines()
    assert line.startswith("error: ") and says in line, line
