"""`run`'s "what to send" options: the workload they build is the one the Load test page builds
(known answers), every bad value or pair of options is one sentence with exit code 2, and one real run
sends a dataset file to the session's vLLM server and records the workload, not the file."""
from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys

import pytest

from engine.errors import ConfigError, LabError
from engine.measure.workloads import scenarios, seeds
from engine.measure.workloads.named import named

from tests.cli_spec import load_of

from .conftest import MODELS, ROOT, cli_in_process
from .said import tree

FIVE = ["What is the capital of France?", "Name three primary colours.", "How many legs does a spider have?",
        "Translate 'good morning' into Korean.", "What is 12 times 12?"]


@pytest.fixture
def five(tmp_path):
    path = tmp_path / "five.jsonl"
    path.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in FIVE), encoding="utf-8")
    return path


def cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "engine", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def test_a_five_row_jsonl_gives_exactly_those_five_prompts_and_records_the_workload_not_the_file(five):
    load = load_of("dataset-chat", "--dataset", str(five))
    assert load.prompts == FIVE and load.n == 5
    assert (load.shape, load.concurrency) == ("concurrency", 4)  # the scenario's arrival stays
    w = load.workload
    assert (w["kind"], w["name"], w["rows"], w["sent"]) == ("dataset", "five.jsonl", 5, 5)
    assert w["sha256"] == hashlib.sha256(five.read_bytes()).hexdigest()
    assert w["input_tokens"]["min"] >= 1 and w["input_tokens"]["max"] >= w["input_tokens"]["min"]
    assert str(five.parent) not in json.dumps(w)  # its name, never the path on this machine
    assert "5 requests" in str(load.label)


def test_num_prompts_sample_and_output_len_choose_rows_and_answer_lengths(five):
    load = load_of("dataset-chat", "--dataset", str(five), "--num-prompts", "2", "--output-len", "12",
                   "--concurrency", "2")
    assert load.prompts == FIVE[:2] and load.concurrency == 2
    assert load.max_tokens_each == [12, 12] and load.ignore_eos
    picked = load_of("dataset-chat", "--dataset", str(five), "--num-prompts", "3", "--sample", "random").prompts
    assert len(picked) == 3 and set(picked) < set(FIVE) and picked == [p for p in FIVE if p in picked]


def test_input_and_output_len_draw_the_same_seeded_lengths_the_page_would():
    from engine.measure.workloads.defaults import workload_plan

    load = load_of("concurrent-10", "--input-len", "100-300", "--output-len", "40:10", "--num-prompts", "6",
                   "--seed", "0")
    page = workload_plan({"kind": "lengths", "n": 6, "input": {"kind": "uniform", "low": 100, "high": 300},
                          "output": {"kind": "normal", "mean": 40, "stdev": 10, "low": 1, "high": 80}, "seed": 0},
                         models_dir=MODELS)  # the command's models, as the app's
    assert load.prompts == page.prompts and load.max_tokens_each == page.max_tokens_each
    assert load.workload["inputs"] == {"kind": "uniform", "low": 100, "high": 300}  # no unused mean beside them
    assert load_of("concurrent-10", "--input-len", "64", "--num-prompts", "3").workload["input_tokens"]["max"] >= 1


def test_synthetic_prompts_take_a_new_seed_each_run_unless_one_is_given():
    """Once, synthetic prompts were always seed 0, so a repeated random-512-64 found them in the prefix cache."""
    a, b = load_of("random-512-64"), load_of("random-512-64")
    assert a.prompt_seed != b.prompt_seed and a.prompts != b.prompts
    assert a.workload["seed"] == a.prompt_seed and "seed" in str(named(a.workload))
    fixed = [load_of("random-512-64", "--seed", "42") for _ in range(2)]
    assert fixed[0].prompts == fixed[1].prompts and fixed[0].prompt_seed == 42 == fixed[0].workload["seed"]
    assert load_of("concurrent-10", "--input-len", "64", "--num-prompts", "3", "--seed", "7").prompt_seed == 7
    # each repeat after the first a new draw of the same shape, its seed recorded
    again = seeds.reseed(fixed[0], 43)
    assert again.prompts != fixed[0].prompts and again.workload["seed"] == 43 and len(again.prompts) == 32
    assert again.max_tokens_each == fixed[0].max_tokens_each and again.label == fixed[0].label
    with pytest.raises(ConfigError) as e:
        load_of("concurrent-10", "--seed", "1")
    own = tree(e.value)
    assert own["id"] == ("--seed makes synthetic prompts from that seed, and the {name} scenario sends prompts of its "
                         "own: give --input-len or --prefix-len with it, or run one of {names}.")
    assert own["name"] == "concurrent-10" and "sweep, slo-search, sustained" in own["names"], own
    with pytest.raises(ConfigError) as e:
        load_of("random-512-64", "--seed", "-1")
    assert tree(e.value) == {"id": "--seed must be a whole number from 0 to {top:,}, not {v}.", "top": 2**31 - 1,
                             "v": -1}


@pytest.mark.parametrize("name", ["sweep", "slo-search", "sustained", "ramp-up", "bursty"])
def test_the_scenarios_of_synthetic_prompts_take_a_new_seed_each_run_unless_one_is_given(name):
    """Once, the sweep, the SLO search, sustained, ramp-up and bursty sent seed 0's (or 1's, 2's, 3's)
    prompts every run, so a second run found the first's in vLLM's prefix cache, and --seed was refused."""
    slo = ("--slo-ttft-ms", "500") if name == "slo-search" else ()
    a, b = load_of(name, *slo), load_of(name, *slo)
    assert a.prompt_seed is not None and a.prompt_seed != b.prompt_seed and a.prompts != b.prompts
    fixed = [load_of(name, "--seed", "42", *slo) for _ in range(2)]
    assert fixed[0].prompts == fixed[1].prompts and fixed[0].prompt_seed == 42 and fixed[0].prompts != a.prompts
    scn = scenarios.get(name)
    assert len(a.prompts) == len(scn.prompts)  # the shape kept: as many prompts, as long (the sweep's extra words)
    assert {len(p.split()) > 24 for p in a.prompts} == {scn.prompt_words > 0}
    assert a.as_dict()["prompt_seed"] == a.prompt_seed  # recorded with the run (its load)


def test_each_level_of_a_sweep_or_search_sends_prompts_of_its_own(monkeypatch):
    """A sweep's levels all sent the same prompts, so every level after the first found them in the prefix cache;
    now level i's are the seed plus i's, the same again for the same --seed."""
    from engine.runs.runner import Runner
    from engine.measure.judge.slo import Slo

    sent: list = []

    def level(self, spec, level, target, rounds, progress, cancel, rate=None, **notes):
        sent.append(spec)
        from engine.results.records import RunResult

        run = RunResult(kind="vllm", scenario=spec.scenario, label="x", records=[], duration=1.0, started_at=0.0)
        run.load = spec.as_dict()
        return run

    class Aimed:
        def aim(self, spec):
            return spec

    monkeypatch.setattr(Runner, "_level", level)
    runner = Runner.__new__(Runner)
    runner.cancel, runner.progress, runner.mark = __import__("threading").Event(), _Quiet(), lambda *_: None
    runner.models_dir = MODELS
    runner.sweep(load_of("sweep", "--seed", "42"), [1, 2, 4], Aimed())
    assert [s.prompt_seed for s in sent] == [42, 43, 44] and len({tuple(s.prompts) for s in sent}) == 3
    assert all(s.prompt_words == 24 for s in sent)
    first = list(sent)
    sent.clear()
    runner.sweep(load_of("sweep", "--seed", "42"), [1, 2, 4], Aimed())
    assert [s.prompts for s in sent] == [s.prompts for s in first]  # the same seed: the same prompts again
    sent.clear()
    runner.rate_sweep(load_of("sweep", "--seed", "42"), [1.0, 2.0], Aimed())  # by rate: the same rule
    assert [s.prompt_seed for s in sent] == [42, 43] and sent[0].prompts != sent[1].prompts
    sent.clear()
    monkeypatch.setattr("engine.runs.runner.judge", lambda run, slo: __import__("types").SimpleNamespace(meets=True))
    runner.slo_search(load_of("slo-search", "--seed", "7", "--slo-ttft-ms", "500"), Aimed(), Slo(ttft_ms=100),
                      low=1, high=4)
    assert [s.prompt_seed for s in sent] == [7, 8] and sent[0].prompts != sent[1].prompts


class _Quiet:
    def __getattr__(self, name):
        return lambda *a, **k: None


def test_turns_trace_time_scale_ramp_up_and_burstiness_reach_the_spec():
    chat = load_of("concurrent-10", "--turns", "2", "--num-prompts", "3")
    assert len(chat.conversations) == 3 and all(len(c) == 2 for c in chat.conversations)
    assert chat.workload["name"] == "chat-prompts.jsonl"  # the shipped prompts without --dataset
    whole, half = load_of("trace-tiny"), load_of("trace-tiny", "--time-scale", "0.5")
    assert half.offsets == pytest.approx([t / 2 for t in whole.offsets])
    bursty = load_of("sustained", "--burstiness", "0.5", "--ramp-up", "10")
    assert (bursty.burstiness, bursty.ramp_up_s, bursty.shape) == (0.5, 10.0, "poisson")


@pytest.mark.parametrize("text, kind, fields", [
    ("200", "fixed", {"mean": 200}), ("100-300", "uniform", {"low": 100, "high": 300}),
    ("200:50", "normal", {"mean": 200, "stdev": 50, "low": 1, "high": 400}), ("chat-like", "chat-like", {})])
def test_a_length_word_names_its_distribution(text, kind, fields):
    from engine.measure.workloads.lengths import from_text

    got = from_text(text)
    assert got.kind == kind and all(getattr(got, k) == v for k, v in fields.items())


@pytest.mark.parametrize("text", ["many", "1.5", "300-100", "0", "-5", "200:", "200:-3", "100-"])
def test_a_bad_length_word_is_one_sentence(text):
    from engine.measure.workloads.lengths import from_text

    with pytest.raises(LabError) as e:
        from_text(text, what="--input-len")
    assert str(e.value).count(". ") == 0 and str(e.value).endswith((".", ")."))


# (argv, a piece of the one sentence): each refused before anything is read from a server or saved
BAD = [
    (["dataset-chat", "--dataset", "{tmp}/five.jsonl", "--trace", "{tmp}/five.jsonl"],
     "--dataset and --trace cannot go together: both say what to send."),
    (["concurrent-10", "--dataset", "{tmp}/five.jsonl", "--input-len", "100"], "--dataset and --input-len cannot go"),
    (["trace-tiny", "--trace", "{tmp}/five.jsonl", "--ramp-up", "5"], "a trace brings its own clock"),
    (["concurrent-10", "--turns", "3", "--output-len", "20"], "--turns and --output-len cannot go together"),
    (["concurrent-10", "--time-scale", "0.5"], "--time-scale scales a trace's clock"),
    (["concurrent-10", "--num-prompts", "5"], "--num-prompts counts a workload's requests"),
    (["concurrent-10", "--output-len", "20"], "for the scenario's own prompts, --max-tokens sets their length"),
    (["concurrent-10", "--burstiness", "0.5"], "--burstiness shapes Poisson arrivals, and the concurrent-10 scenario "
                                               "sends all its requests at once"),
    (["concurrent-10", "--ramp-up", "10"], "--ramp-up raises the requests in flight or a Poisson rate"),
    (["naive-5", "--dataset", "{tmp}/five.jsonl"], "The naive scenario sends the lab's prompts through transformers"),
    (["sweep", "--turns", "2"], "The sweep sets the requests in flight itself"),
    (["dataset-chat", "--dataset", "{tmp}/five.jsonl", "--output-len", "10-20"], "With --dataset, --output-len is one"),
    (["dataset-chat", "--dataset", "{tmp}/five.jsonl", "--num-prompts", "0"], "give a whole number from 1 on, not 0."),
    (["concurrent-10", "--input-len", "lots"], "--input-len 'lots' is not a length"),
    (["dataset-chat", "--dataset", "{tmp}/missing.jsonl"], "missing.jsonl does not exist"),
    (["dataset-chat", "--dataset", "{tmp}"], "is a folder"),
    (["dataset-chat", "--dataset", "{tmp}/broken.jsonl"], "Line 2 of broken.jsonl is not JSON"),
    (["dataset-chat", "--dataset", "{tmp}/big.jsonl"], "big.jsonl is 200 MB; a workload file is read up to 64 MB"),
    (["dataset-chat", "--dataset", "{tmp}/empty-row.jsonl"], "Row 2 of empty-row.jsonl has an empty prompt"),
    (["dataset-chat", "--dataset", "{tmp}/binary.jsonl"], "binary.jsonl is a binary file"),
    (["trace-tiny", "--trace", "{tmp}/five.jsonl"], "Row 1 of five.jsonl lacks a timestamp"),
    (["concurrent-10", "--turns", "0"], "A conversation has from 1 to 64 turns, not 0."),
    (["sustained", "--burstiness", "0"], "The burstiness must be above 0"),
]


@pytest.mark.parametrize("argv, says", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_a_bad_workload_option_is_one_sentence_with_exit_code_2(argv, says, tmp_path, five):
    (tmp_path / "broken.jsonl").write_text('{"prompt": "fine"}\n{"prompt": oops}\n')
    (tmp_path / "empty-row.jsonl").write_text('{"prompt": "fine"}\n{"prompt": "  "}\n')
    (tmp_path / "binary.jsonl").write_bytes(b"\x00\x01\x02PK" * 100)
    with open(tmp_path / "big.jsonl", "wb") as f:  # sparse: 200 MB on paper, nothing on the disk
        f.truncate(200 * 2**20)
    at = [] if argv[0] == "naive-5" else ["--url", "http://127.0.0.1:9"]  # nothing there: never asked
    p = cli_in_process("run", *[a.replace("{tmp}", str(tmp_path)) for a in argv], *at)
    out = p.stdout + p.stderr
    assert p.returncode == 2 and "Traceback" not in out and p.stdout == "", out
    line, = p.stderr.splitlines()
    assert line.startswith("error: ") and line.endswith("."), line
    assert says in line, line


def test_the_help_documents_the_length_forms():
    p = cli_in_process("run", "--help")
    text = re.sub(r"\s+", " ", p.stdout)
    assert p.returncode == 0
    for piece in ("--dataset FILE", "--input-len LEN", "MEAN:STDEV", "LOW-HIGH", "--turns K", "--trace FILE",
                  "--time-scale X", "--ramp-up SECONDS", "--burstiness B", "vllm bench serve --burstiness"):
        assert piece in text, piece


@pytest.mark.server
def test_a_dataset_file_runs_against_the_real_server_and_is_recorded_as_the_workload(vllm_server, five, lab_settings):
    from engine.results.store import RunStore

    p = cli("run", "dataset-chat", "--url", vllm_server.base_url, "--dataset", str(five), "--max-tokens", "8")
    assert p.returncode == 0, p.stderr
    assert "requests ok / failed   5 / 0" in p.stdout
    run_id = re.search(r"saved as run (\S+)", p.stdout).group(1)
    run = RunStore(lab_settings.db).load(run_id)
    assert sorted(r.prompt for r in run.measured) == sorted(FIVE)  # those five, each once
    w = run.load.workload
    assert (w["kind"], w["name"], w["rows"]) == ("dataset", "five.jsonl", 5)
    assert w["sha256"] == hashlib.sha256(five.read_bytes()).hexdigest()
    # the Python behind it reads the same file beside it and sends those five rows, as printed
    from engine.measure.snippets.load import run_code

    code = run_code(run)
    assert 'FILE = "five.jsonl"' in code
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}  # as on an attendee's machine
    done = subprocess.run([sys.executable, "-c", code], cwd=five.parent, capture_output=True, text=True, timeout=300,
                          env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert re.search(r"^5 requests in [\d.]+ s, mean latency [\d.]+ s$", done.stdout, re.MULTILINE), done.stdout
