"""Requests arriving at a rate, as `vllm bench serve` sends them: the seeded arrival times (Poisson, gamma, constant,
ramped by rate), the cap on requests in flight, the header and summary that say them, every bad value refused in
one sentence, and one run against the real server whose record holds its rate and whose sends follow it."""
from __future__ import annotations

import io
import math
import re
import statistics
import subprocess
import sys

import pytest

from engine.cli import parse
from engine.cli.run import _load
from engine.cli.run_options import check_run_options
from engine.errors import ConfigError
from engine.measure.load import arrivals
from engine.measure.load.loadgen import run_load
from engine.cli.console import Console
from engine.measure.load.spec import LoadSpec
from engine.measure.workloads import scenarios

from .conftest import ROOT, cli_in_process
from .fakes import FakeOpenAIServer
from .said import read, reads, said as tsaid, shown as shown_as, tree, values

CAPPED = ("At most {peak} requests were in flight at once (observed; capped at {cap}), and {waited} of {n} arrivals "
          "waited for a slot.")


def gaps(xs: list[float]) -> list[float]:
    return [b - a for a, b in zip([0.0, *xs], xs)]


# -- the arrival times (seeded, no clock) ---------------------------------------------------------------------------

def test_poisson_arrivals_come_at_the_rate_and_gamma_ones_vary_as_their_burstiness_says():
    n, rate = 20_000, 5.0
    for b in (0.25, 1.0, 4.0):
        g = gaps(arrivals.offsets(n, rate, seed=3, burstiness=b))
        assert statistics.fmean(g) == pytest.approx(1 / rate, rel=1e-9)  # rescaled: the last at n/rate exactly
        cv2 = statistics.pvariance(g) / statistics.fmean(g) ** 2  # a gamma of shape b: squared CV 1/b
        assert cv2 == pytest.approx(1 / b, rel=0.1)


def test_constant_arrivals_are_evenly_spaced():
    assert arrivals.offsets(5, 4.0, seed=9, arrival="constant") == pytest.approx([0.25, 0.5, 0.75, 1.0, 1.25])


def test_a_ramp_by_rate_starts_and_ends_at_its_rates_as_vllm_bench_serve_computes_them():
    lin = gaps(arrivals.offsets(5, 9.0, seed=0, arrival="constant", ramp_strategy="linear", ramp_start_rps=1.0))
    assert lin == pytest.approx([1 / 1, 1 / 3, 1 / 5, 1 / 7, 1 / 9])  # request i at 1 + 8 i / 4 requests/s
    exp = gaps(arrivals.offsets(5, 16.0, seed=0, arrival="constant", ramp_strategy="exponential",
                                ramp_start_rps=1.0))
    assert exp == pytest.approx([1 / 1, 1 / 2, 1 / 4, 1 / 8, 1 / 16])  # 1 × 16^(i/4)
    # Poisson under a linear ramp: the first requests arrive near the start rate, the last near the end rate
    g = gaps(arrivals.offsets(40_000, 20.0, seed=1, ramp_strategy="linear", ramp_start_rps=2.0))
    assert 1 / statistics.fmean(g[:400]) == pytest.approx(2.0, rel=0.15)
    assert 1 / statistics.fmean(g[-400:]) == pytest.approx(20.0, rel=0.15)


def test_arrivals_are_the_same_for_a_seed_and_differ_for_another():
    a = arrivals.offsets(50, 3.0, seed=7, burstiness=0.5, ramp_strategy="linear", ramp_start_rps=1.0)
    assert a == arrivals.offsets(50, 3.0, seed=7, burstiness=0.5, ramp_strategy="linear", ramp_start_rps=1.0)
    assert a != arrivals.offsets(50, 3.0, seed=8, burstiness=0.5, ramp_strategy="linear", ramp_start_rps=1.0)


# -- the spec -------------------------------------------------------------------------------------------------------

def spec(**over) -> LoadSpec:
    return LoadSpec(**{"base_url": "http://h:1", "model": "m", "prompts": ["p"], "num_requests": 4, **over})


def test_the_arrivals_are_named_by_what_they_draw_and_said_with_their_rate_ramp_and_cap():
    assert spec(shape="poisson", rate=2.0).arrival == "poisson"
    assert spec(shape="poisson", rate=2.0, burstiness=0.5).arrival == "gamma"
    assert spec(shape="poisson", rate=2.0, arrival="gamma").arrival == "poisson"  # burstiness 1 is Poisson
    tokens = {"id": "{max_tokens} tokens", "max_tokens": 200}
    assert tree(spec(shape="poisson", rate=4.0, arrival="constant", max_in_flight=8).describe()) == {
        "id": "{n} request, {arrivals}, {tokens}", "n": 4, "tokens": tokens,
        "arrivals": {"id": "{arrivals}, at most {cap} in flight", "cap": 8,
                     "arrivals": {"id": "constant {rate:g}/s", "rate": 4.0}}}
    assert tree(spec(shape="poisson", rate=8.0, ramp_strategy="exponential", ramp_start_rps=1.0).describe()) == {
        "id": "{n} request, {arrivals}, {tokens}", "n": 4, "tokens": tokens,
        "arrivals": {"id": "Poisson from {start:g} to {end:g}/s, {how}", "start": 1.0, "end": 8.0,
                     "how": {"id": "exponential by request"}}}
    assert spec(shape="poisson", rate=4.0, max_in_flight=3).in_flight() == 3


BAD = [
    (dict(shape="poisson", rate=0.0, arrival="constant"), "The rate must be above 0 and at most 1000 requests/s"),
    (dict(shape="poisson", rate=-1.0), "The Poisson rate must be above 0"),
    (dict(shape="poisson", rate=2.0, arrival="constant", burstiness=0.5), "Constant arrivals are evenly spaced"),
    (dict(shape="poisson", rate=2.0, arrival="zigzag"), "The arrivals 'zigzag' are unknown"),
    (dict(shape="concurrency", concurrency=2, max_in_flight=2), "A cap on requests in flight holds back arrivals"),
    (dict(shape="poisson", rate=2.0, max_in_flight=0), "The most requests in flight (max concurrency) must be"),
    (dict(shape="poisson", rate=2.0, ramp_strategy="linear", ramp_start_rps=3.0), "is above its end rate"),
    (dict(shape="poisson", rate=2.0, ramp_strategy="linear", ramp_start_rps=0.0), "starting rate must be above 0"),
    (dict(shape="poisson", rate=2.0, ramp_strategy="sideways", ramp_start_rps=1.0), "strategy 'sideways' is unknown"),
    (dict(shape="poisson", rate=2.0, ramp_start_rps=1.0), "needs its strategy"),
    (dict(shape="poisson", rate=2.0, ramp_strategy="linear", ramp_start_rps=1.0, ramp_up_s=5.0), "give only one"),
    (dict(shape="concurrency", ramp_strategy="linear", ramp_start_rps=1.0), "A ramp by rate raises the rate"),
]


@pytest.mark.parametrize("over,said", BAD)
def test_each_bad_rate_setting_is_one_sentence(over, said):
    with pytest.raises(ConfigError) as e:
        spec(**over)
    assert said in str(e.value) and str(e.value).count(". ") == 0 and "\n" not in str(e.value)


# -- the command line -----------------------------------------------------------------------------------------------

def load_of(*argv: str) -> LoadSpec:
    args = parse(["run", *argv])
    scn = scenarios.get(args.scenario)
    check_run_options(scn, args)
    return _load(scn, args)


def test_request_rate_and_its_companions_reach_the_spec():
    load = load_of("concurrent-10", "--request-rate", "4", "--max-concurrency", "3")
    assert (load.shape, load.rate, load.arrival, load.max_in_flight) == ("poisson", 4.0, "poisson", 3)
    assert "Poisson 4/s, at most 3 in flight" in str(load.label)
    gamma = load_of("concurrent-10", "--request-rate", "2", "--burstiness", "0.5")
    assert (gamma.arrival, gamma.burstiness) == ("gamma", 0.5)
    constant = load_of("bursty", "--arrival", "constant")  # the scenario's rate, evenly spaced: its burstiness gone
    assert (constant.shape, constant.rate, constant.arrival, constant.burstiness) == ("poisson", 2.0, "constant", 1.0)
    ramp = load_of("sustained", "--ramp-up-strategy", "linear", "--ramp-up-start-rps", "1", "--ramp-up-end-rps", "6")
    assert (ramp.rate, ramp.ramp_strategy, ramp.ramp_start_rps) == (6.0, "linear", 1.0)
    assert load_of("concurrent-10", "--request-rate", "inf").shape == "burst"  # vllm bench serve's default
    capped = load_of("concurrent-10", "--request-rate", "inf", "--max-concurrency", "4")
    assert (capped.shape, capped.concurrency) == ("concurrency", 4)
    assert load_of("concurrent-10", "--request-rate", "4").as_dict()["max_in_flight"] is None  # recorded


RATE = "{what} must be above 0 and at most {limit:g} requests/s, not {rate}."
NOT_HERE = "The {name} scenario {how}, so {flag} does not apply: leave it out, or give {by} to run it at arrival rates."
CLI_BAD = [  # the options, the sentence's message id, and the values it shows
    (["concurrent-10", "--request-rate", "-1"], RATE, {"what": "--request-rate", "rate": "-1.0"}),
    (["concurrent-10", "--request-rate", "0"], RATE, {"what": "--request-rate", "rate": "0.0"}),
    (["concurrent-10", "--request-rate", "nan"], RATE, {"what": "--request-rate", "rate": "nan"}),
    (["sustained", "--ramp-up-strategy", "linear", "--ramp-up-start-rps", "5", "--ramp-up-end-rps", "2"],
     "--ramp-up-start-rps ({start:g}) is above --ramp-up-end-rps ({end:g}): a ramp rises; start lower, or end higher.",
     {"start": "5", "end": "2"}),
    (["sustained", "--ramp-up-strategy", "exponential", "--ramp-up-start-rps", "0", "--ramp-up-end-rps", "2"], RATE,
     {"what": "--ramp-up-start-rps", "rate": "0.0"}),
    (["sustained", "--ramp-up-strategy", "linear", "--ramp-up-end-rps", "2"],
     "--ramp-up-strategy needs both --ramp-up-start-rps and --ramp-up-end-rps.", {}),
    (["sustained", "--ramp-up-start-rps", "1"],
     "{flag} is part of a ramp by rate: give --ramp-up-strategy linear or exponential with it.",
     {"flag": "--ramp-up-start-rps"}),
    (["sustained", "--request-rate", "3", "--ramp-up-strategy", "linear", "--ramp-up-start-rps", "1",
      "--ramp-up-end-rps", "2"],
     "A ramp by rate sets the rate itself, from --ramp-up-start-rps to --ramp-up-end-rps: leave --request-rate out.",
     {}),
    (["concurrent-10", "--request-rate", "2", "--arrival", "gamma"],
     "Gamma arrivals are shaped by their burstiness: give --burstiness B (1 would be Poisson; below 1 burstier, above "
     "1 steadier).", {}),
    (["concurrent-10", "--request-rate", "2", "--arrival", "constant", "--burstiness", "0.5"],
     "--burstiness shapes gamma arrivals, and --arrival {arrival} is not: leave --burstiness out, or give --arrival "
     "gamma.", {"arrival": "constant"}),
    (["concurrent-10", "--arrival", "constant"],
     "--arrival spaces requests that arrive at a rate, and the {name} scenario {how}: give --request-rate with it.",
     {"name": "concurrent-10"}),
    (["concurrent-10", "--max-concurrency", "4"],
     "--max-concurrency caps requests that arrive at a rate, and the {name} scenario {how}: give --request-rate with "
     "it.", {"name": "concurrent-10"}),
    (["concurrent-10", "--request-rate", "2", "--max-concurrency", "0"],
     "{what} must be a whole number from {lo} to {hi}, not {v}.", {"what": "--max-concurrency", "v": "0"}),
    (["dataset-chat", "--request-rate", "2", "--concurrency", "4"],
     "--concurrency keeps a number of requests in flight, and {flag} sends them at a rate: cap them with "
     "--max-concurrency instead.", {"flag": "--request-rate"}),
    (["sweep", "--request-rate", "2"], NOT_HERE, {"name": "sweep", "flag": "--request-rate", "by": "--rates LIST"}),
    (["naive-5", "--request-rate", "2"], "The {name} scenario {how}, so {flag} does not apply: leave it out, or pick a "
     "load scenario (python -m engine list).", {"name": "naive-5", "flag": "--request-rate"}),
    (["trace-tiny", "--request-rate", "2"], "A trace brings its own clock, so {flag} does not apply: leave it out.",
     {"flag": "--request-rate"}),
]


def refused(argv: list[str], template: str, shown: dict[str, str]) -> None:
    """The command refuses `argv` with exit 2 and one line on stderr ("error: ..."), no traceback: the sentence of
    message id `template`, showing the values in `shown`."""
    p = cli_in_process("run", *argv)
    assert p.returncode == 2, p.stdout + p.stderr
    assert p.stderr.startswith("error: ") and p.stderr.count("\n") == 1 and "Traceback" not in p.stderr, p.stderr
    found = read(template, p.stderr)
    assert found is not None and {k: found[k] for k in shown} == shown, (found, p.stderr)


@pytest.mark.parametrize("argv,template,shown", CLI_BAD)
def test_each_bad_rate_option_is_one_sentence_and_exit_2(argv, template, shown):
    refused(argv, template, shown)


# -- a run at a rate: its header, its cap, its record -----------------------------------------------------------------

def test_a_run_at_a_rate_says_its_rate_and_observed_peak_not_a_concurrency_and_keeps_its_cap(tmp_path):
    out = io.StringIO()
    with FakeOpenAIServer(chunk_delay_s=0.05) as srv:
        s = LoadSpec(base_url=srv.base_url, model="ok", prompts=["a", "b"], num_requests=8, max_tokens=6,
                     shape="poisson", rate=200.0, arrival="constant", max_in_flight=2, timeout_s=60)
        result = run_load(s, observer=Console(out=out, log_dir=tmp_path))
    text = out.getvalue()
    header = text.splitlines()[0]
    pace = read("{arrivals}, at most {cap} in flight", header)  # the rate and its cap, not a concurrency
    assert pace["cap"] == "2" and read("constant {rate:g}/s", pace["arrivals"]) == {"rate": "200"}, header
    assert "concurrency" not in header, header
    capped = reads(CAPPED, text)
    assert [(x["peak"], x["cap"], x["n"]) for x in capped] == [("2", "2", "8")], text
    measured = [r for r in result.records if not r.warmup]
    assert all(r.ok for r in measured)
    events = sorted([(r.send_time, 1) for r in measured] + [(r.end_time, -1) for r in measured])
    peak = level = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    assert peak <= 2  # never more than the cap at once, whatever the pace
    assert [r.planned_time for r in measured] == pytest.approx([(i + 1) / 200 for i in range(8)])
    assert sum(r.slot_wait > 0 for r in measured) >= 1  # 8 answers of 6 × 50 ms cannot all fit in 2 slots on time
    assert result.extra.lateness.planned_sends == 8
    assert result.load.other["max_in_flight"] == 2 and result.load.other["arrival"] == "constant"


# -- the real server ------------------------------------------------------------------------------------------------

@pytest.mark.server
def test_a_request_rate_run_records_its_rate_and_sends_on_its_schedule(vllm_server, tmp_path, lab_settings):
    from engine.results.store import RunStore

    prompts = tmp_path / "four.jsonl"
    prompts.write_text("".join(f'{{"prompt": "Say the number {i}."}}\n' for i in range(4)), encoding="utf-8")
    p = subprocess.run([sys.executable, "-m", "engine", "run", "dataset-chat", "--url", vllm_server.base_url,
                        "--dataset", str(prompts), "--max-tokens", "4", "--request-rate", "2", "--max-concurrency",
                        "3"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    pace = read("{arrivals}, at most {cap} in flight", p.stdout)  # the header: the rate and its cap
    assert pace["cap"] == "3" and read("Poisson {rate:g}/s", pace["arrivals"]) == {"rate": "2"}, p.stdout
    assert "concurrency 4" not in p.stdout
    run = RunStore(lab_settings.db).load(re.search(r"saved as run (\S+)", p.stdout).group(1))
    assert (run.load.shape, run.load.rate, run.load.other["max_in_flight"]) == ("poisson", 2.0, 3)
    measured = sorted(run.measured, key=lambda r: r.index)
    planned = arrivals.offsets(4, 2.0, run.load.other["seed"])
    assert [r.planned_time for r in measured] == pytest.approx(planned)  # the schedule the rate draws, recorded
    for r in measured:  # each sent at its planned time, never before (liveness bound only: a loaded machine)
        assert r.planned_time <= r.send_time < r.planned_time + (r.slot_wait or 0) + 30


# -- the Load test page ---------------------------------------------------------------------------------------------

def _number(at, label: str):
    return next(n for n in at.number_input if n.label == label)


def _at_a_rate(at, rate: float, spacing: str, cap: int, ramp: str, value: float):
    at.radio(key="load_arrival").set_value("At a rate").run()
    _number(at, "Rate (requests/s)").set_value(rate)
    at.selectbox(key="load_spacing").set_value(spacing)
    at.number_input(key="load_cap").set_value(cap)
    at.selectbox(key="load_ramp").set_value(ramp)
    at.number_input(key="load_ramp_value").set_value(value)
    next(b for b in at.button if b.label == "Run load test").click().run()
    return at


def test_the_load_page_sends_a_rate_with_its_spacing_cap_and_ramp_records_and_shows_them(lab):
    from .conftest import app_page, wait_done

    with FakeOpenAIServer(models=("ok",)) as srv:
        wait_done(lab.connect(srv.base_url), 60)
        try:
            at = _at_a_rate(app_page("app_pages/load.py"), 50.0, "Evenly spaced", 2, "Linear by request", 10.0)
            assert not at.exception and not at.error, [e.value for e in at.error]
            job = lab.latest_job("load")
            wait_done(job, 120)
            run = job.result
            load = run.load
            assert (load.shape, load.rate) == ("poisson", 50.0)
            assert {k: load.other.get(k) for k in ("arrival", "max_in_flight", "ramp_strategy", "ramp_start_rps")} == \
                {"arrival": "constant", "max_in_flight": 2, "ramp_strategy": "linear", "ramp_start_rps": 10.0}
            planned = [r.planned_time for r in sorted(run.measured, key=lambda r: r.index)]
            assert planned == pytest.approx(arrivals.offsets(run.load.num_requests, 50.0, 0, arrival="constant",
                                                             ramp_strategy="linear", ramp_start_rps=10.0))
            at.run()
            shown = [c.value.replace("\\", "") for c in at.caption]
            assert [(x["peak"], x["cap"]) for x in shown_as(CAPPED, shown)] == [("2", "2")], shown
            told = [read("{arrivals}, at most {cap} in flight", x["arrivals"])
                    for x in shown_as("Arrivals: {arrivals}.", shown)]
            assert [(x["cap"], read("constant from {start:g} to {end:g}/s, {how}", x["arrivals"])) for x in told] == [
                ("2", {"start": "10", "end": "50", "how": "linear by request"})], shown
            # every bad value: one sentence where Run was pressed, nothing sent
            random = "Random (Poisson, gamma)"
            for args, said in (((0.0, random, 0, "No ramp", 0.0), "The Poisson rate must be above 0"),
                               ((-2.0, "Evenly spaced", 0, "No ramp", 0.0), "The rate must be above 0"),
                               ((4.0, random, -1, "No ramp", 0.0), "The most requests in flight"),
                               ((4.0, random, 0, "Exponential by request", 0.0), "starting rate must be above 0"),
                               ((4.0, random, 0, "Linear by request", 8.0), "is above its end rate (4)")):
                at = _at_a_rate(app_page("app_pages/load.py"), *args)
                errors = [e.value.replace("\\", "") for e in at.error]
                assert len(errors) == 1 and said in errors[0], (args, errors)
                assert lab.latest_job("load") is job
        finally:
            lab.detach()


# -- sweeps and SLO searches at rates, their ranges from the server's capacity ----------------------------------------

def test_the_levels_follow_the_servers_kv_cache_its_reported_concurrency_and_max_num_seqs():
    from types import SimpleNamespace

    from engine.runs.capacity import capacity

    kv = capacity(SimpleNamespace(kv_cache_tokens=46_592, max_concurrency=None, config=None), 168, [1, 32])
    assert kv.fits == 277 and kv.levels == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]  # past 277: where requests wait
    holds = {"id": "its KV cache's {tokens:,} tokens hold about {fits:,} requests of {per} tokens at once",
             "tokens": 46_592, "fits": 277, "per": 168}
    assert tree(kv.said) == {"id": "The levels follow the server's capacity: {why}, so they go up to {top} in flight.",
                             "why": holds, "top": 512}
    seqs = capacity(SimpleNamespace(kv_cache_tokens=46_592, max_concurrency=None,
                                    config=SimpleNamespace(max_num_seqs=64)), 168, [1, 32])
    assert seqs.fits == 64 and seqs.levels[-1] == 128
    assert tree(seqs.said)["why"] == {"id": "{why}, and its --max-num-seqs lets {seqs} run at once", "why": holds,
                                      "seqs": 64}
    h100 = capacity(SimpleNamespace(kv_cache_tokens=None, max_concurrency=205.3, config=None), 168, [1, 32])
    assert h100.fits == 205 and h100.levels[-1] == 256  # the H100: not "32, search higher"
    silent = capacity(SimpleNamespace(kv_cache_tokens=None, max_concurrency=None, config=None), 168, [1, 32])
    assert silent.fits is None and silent.levels == [1, 32] and "does not say" in silent.said


@pytest.fixture(scope="module")
def doubled_on_the_cli():
    """One SLO search from the command line against a fake that says nothing of its capacity, and the `SloSearch`
    Runner.slo_search gave the CLI: the CLI's sentences and the search's levels are different facts of one search,
    so the two tests below share its fake's time instead of running the same search twice. The fake's rule decides
    each level, not this machine's pace: two slots, each 30-token answer 150 ms by the fake's own clock, and a
    request that finds both streaming gets its first token 1.2 s after it arrived (wait_s), past the 1 s TTFT limit
    on any machine; one that finds a slot has 1 s for what a loaded machine adds. At 3 or more in flight at least
    one request of each level's first batch finds none (at 3, one of its 8 late: 87 %, under the 90 % asked)."""
    from engine.runs import Runner

    searches = []
    original = Runner.slo_search

    def kept(self, *args, **kwargs):
        searches.append(original(self, *args, **kwargs))
        return searches[-1]

    with pytest.MonkeyPatch.context() as mp, FakeOpenAIServer(slots=2, wait_s=1.2, chunk_delay_s=0.005,
                                                                models=("ok",)) as srv:
        mp.setattr(Runner, "slo_search", kept)
        p = cli_in_process("run", "slo-search", "--url", srv.base_url, "--slo-ttft-ms", "1000", "--max-tokens", "30")
    return p, searches


def test_a_search_without_a_top_doubles_until_the_slo_misses_then_bisects(doubled_on_the_cli):
    _, searches = doubled_on_the_cli
    [search] = searches
    assert search.levels == [1, 2, 4, 3] and (search.best, search.above) == (2, 3), search.tried
    assert search.high == 4 and search.doubled  # the top it reached, not a fixed 32 or 64


def test_a_search_by_rate_doubles_from_its_lowest_and_every_level_arrives_at_its_rate():
    from engine.measure.judge.slo import Slo
    from engine.runs import Runner, Target

    base = LoadSpec(base_url="", model="", prompts=["hi"], num_requests=2, max_tokens=20, ignore_eos=True,
                    shape="poisson", rate=1.0, arrival="constant")
    runner = Runner(save=lambda r: r)
    runner.rate_level_s = 1.0  # 1 s of arrivals a level: what is checked is each level's rate and count, not a queue
    # two 400 ms answers at once, and a request that finds both streaming waits 1.2 s for its first token: from
    # 8/s (3.2 answers due at once) some of every level's requests miss by the fake's clock, so the doubling ends
    with FakeOpenAIServer(slots=2, wait_s=1.2, chunk_delay_s=0.02) as srv:
        search = runner.slo_search(base, Target(srv.base_url, "ok"), Slo(ttft_ms=1000.0), low=2.0, high=None,
                                   tolerance=2.0, by="rate")
    levels = search.levels
    first_miss = next((i for i, (_, held, _) in enumerate(search.tried) if not held), len(levels))
    assert levels[:first_miss + 1] == [2.0 * 2 ** i for i in range(first_miss + 1)][:len(levels)]  # doubling
    assert all(search.best is None or search.best < lv for lv in levels[first_miss + 1:] if lv == search.above)
    for level, _, run in search.tried:  # each level at its own rate, its arrivals evenly spaced, 1 s of them at least
        assert (run.load.shape, run.load.rate, run.load.other["arrival"]) == ("poisson", level, "constant")
        assert run.load.num_requests == max(2, math.ceil(level * 1.0))
    assert search.high == max(levels)


def test_a_rate_sweep_runs_each_rate_in_order_and_records_it():
    from engine.runs import Runner, Target

    base = LoadSpec(base_url="", model="", prompts=["hi"], num_requests=2, max_tokens=4, shape="poisson", rate=1.0,
                    max_in_flight=3)
    runner = Runner(save=lambda r: r)
    runner.rate_level_s = 1.0
    with FakeOpenAIServer() as srv:
        runs = runner.rate_sweep(base, [2.0, 8.0], Target(srv.base_url, "ok"))
    assert [(r.load.rate, r.load.num_requests, r.load.other["max_in_flight"]) for r in runs] == [(2.0, 2, 3),
                                                                                               (8.0, 8, 3)]
    assert [str(r.label) for r in runs] == ["2 requests/s", "8 requests/s"]


def test_sweep_and_search_options_by_rate_reach_the_spec():
    sweep = load_of("sweep", "--rates", "2,0.5,1", "--arrival", "constant", "--max-concurrency", "8")
    assert (sweep.shape, sweep.rate, sweep.arrival, sweep.max_in_flight) == ("poisson", 0.5, "constant", 8)
    args = parse(["run", "sweep", "--rates", "2,0.5,1"])
    assert check_run_options(scenarios.get("sweep"), args) == [0.5, 1.0, 2.0]
    args = parse(["run", "slo-search", "--search-by", "rate", "--slo-ttft-ms", "500"])
    assert check_run_options(scenarios.get("slo-search"), args) == [0.25, None]  # doubling: no fixed top
    args = parse(["run", "slo-search", "--slo-ttft-ms", "500"])
    assert check_run_options(scenarios.get("slo-search"), args) == [1, None]  # the server's capacity says
    args = parse(["run", "sweep"])
    assert check_run_options(scenarios.get("sweep"), args) is None


LEVEL_BAD = [
    (["sweep", "--rates", "0,1"], RATE, {"what": "Each rate of the sweep", "rate": "0.0"}),
    (["sweep", "--rates", "fast"], "The rates '{text}' are not a comma-separated list of numbers, e.g. 0.5,1,2,4.",
     {"text": "fast"}),
    (["sweep", "--rates", "1,2", "--levels", "1,2"],
     "--rates sweeps arrival rates, and --levels and --concurrency numbers in flight: give only --rates.", {}),
    (["sweep", "--request-rate", "2"], NOT_HERE, {"name": "sweep", "flag": "--request-rate", "by": "--rates LIST"}),
    (["concurrent-10", "--rates", "1,2"],
     "--rates are the levels of the sweep scenario: run sweep with it, or give --request-rate for one rate.", {}),
    (["sweep", "--search-by", "rate"],
     "--search-by says what the slo-search scenario searches: run slo-search with it.", {}),
    (["slo-search", "--slo-ttft-ms", "500", "--request-rate", "4"], NOT_HERE,
     {"name": "slo-search", "flag": "--request-rate", "by": "--search-by rate"}),
    (["slo-search", "--slo-ttft-ms", "500", "--search-by", "rate", "--concurrency", "4"],
     "A search by rate looks for the highest arrival rate: give its highest with --request-rate, not --concurrency.",
     {}),
    (["slo-search", "--slo-ttft-ms", "500", "--search-by", "rate", "--request-rate", "0.1"],
     "The search's highest rate must be a number of requests per second from {lowest:g} on, not {rate:g}.",
     {"lowest": "0.25", "rate": "0.1"}),
]


@pytest.mark.parametrize("argv,template,shown", LEVEL_BAD)
def test_each_bad_level_option_is_one_sentence_and_exit_2(argv, template, shown):
    refused(argv, template, shown)


def test_a_rate_sweep_says_its_highest_rate_that_met_the_slo_as_judge_slo_judges_each():
    from engine.measure.judge.slo import Slo, judge, rates_said

    from .test_figures import make_slo_sweep

    runs = make_slo_sweep()
    for i, r in enumerate(runs):
        r.load.rate = float(2 ** i)  # each level as if it had arrived at a rate
    slo = Slo(ttft_ms=500.0)
    held = [r.load.rate for r in runs if judge(r, slo).meets]
    said = rates_said(runs, slo)
    assert held == [1.0, 2.0, 4.0, 8.0, 16.0]  # the fixture's TTFT grows past 0.5 s from the sixth level
    assert values(said) == {"best": 16.0, "above": 32.0, "slo": {"name": "TTFT", "ms": 500.0}}, said
    top = rates_said(runs[:3], slo)  # every level met it: the top one, and higher rates asked for
    assert values(top) == {"best": 4.0, "slo": {"name": "TTFT", "ms": 500.0}} and "sweep higher" in tsaid(top).template


def test_an_slo_search_on_a_server_that_says_nothing_of_itself_doubles_from_1_on_the_command_line(
        doubled_on_the_cli):
    p, _ = doubled_on_the_cli
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr
    assert "doubles the requests in flight from 1" in p.stdout  # a line of the CLI's own, no message id
    found = reads("The most requests in flight that meet the SLO ({slo}) is {best}: {above} did not, found by "
                  "bisection in {n} levels to within {tol}.", p.stdout)
    assert [(x["slo"], x["best"], x["above"]) for x in found] == [("TTFT ≤ 1000 ms", "2", "3")], p.stdout[-1500:]


def test_the_report_says_a_poisson_runs_rate_and_its_observed_peak_not_up_to_1_in_flight():
    from engine.figures.report import _load_said
    from engine.results.records import RequestRecord, RunResult

    recs = [RequestRecord(index=i, prompt="p", send_time=0.5 * i, planned_time=0.5 * i, first_token_time=0.5 * i + 0.1,
                          chunk_times=[0.5 * i + 0.1], end_time=0.5 * i + 1.2) for i in range(3)]
    run = RunResult(kind="vllm", scenario="sustained", label="x", records=recs, duration=2.2, started_at=0.0, model="m",
                    load={"shape": "poisson", "rate": 2.0, "concurrency": 1, "num_requests": 3, "max_tokens": 8})
    said = tree(_load_said(run))
    assert said["id"] == ("{n} requests, {arrivals}; at most {peak} in flight (observed); at most {tokens} output "
                          "tokens each.")
    assert {k: said[k] for k in ("n", "arrivals", "peak", "tokens")} == {
        "n": 3, "arrivals": {"id": "Poisson {rate:g}/s", "rate": 2.0}, "peak": 3, "tokens": 8}
