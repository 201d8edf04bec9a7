"""A Hugging Face dataset by name, through the `datasets` library, from a cache this test writes
the way the library writes one after a download (its own builder, its own folder layout), offline: never the
network. Its rows as a file's rows, sampled and recorded with the dataset's name, split and fingerprint; one
sentence when neither the cache nor the network has it, and for a split or column it lacks."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .said import read

ROOT = Path(__file__).resolve().parent.parent
PROMPTS = [f"Question {i}: what is {i} times {i + 1}?" for i in range(12)]

# Offline from the first import: the library reads these when it is imported. In a child process, so this test's
# settings never reach another's; one child for the module (each asked in turn, a line of JSON each way), since a
# child's imports and the library's first read cost seconds of CPU apiece and every question here shares its settings.
CHILD = r"""
import json, sys
from engine.cli import parse
from engine.cli.run import _load
from engine.cli.run_options import check_run_options
from engine.errors import LabError
from engine.measure.workloads import kinds, scenarios, tokens


def plan(desc):
    plan = kinds.plan_of(desc, tokens.estimated())
    return {"prompts": plan.prompts, "summary": plan.summary, "kind": plan.kind,
            "max_tokens_each": plan.max_tokens_each}


def cli(argv):  # what `python -m engine run ARGV` would send, built as the command builds it
    args = parse(["run", *argv])
    scn = scenarios.get(args.scenario)
    check_run_options(scn, args)
    load = _load(scn, args)
    return {"prompts": load.prompts, "workload": load.workload, "concurrency": load.concurrency}


for line in sys.stdin:
    ask = json.loads(line)
    try:
        said = {"plan": plan, "cli": cli}[ask["op"]](ask["arg"])
    except LabError as e:
        said = {"error": str(e)}
    print(ANSWER + json.dumps(said), flush=True)
""".replace("ANSWER", repr("answer: "))


class Child:
    """The module's child process: ask(op, arg) sends one question and reads its answer (lines before it are what
    the library printed)."""

    def __init__(self, env: dict) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", CHILD], env=env, cwd=ROOT, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def ask(self, op: str, arg) -> dict:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"op": op, "arg": arg}) + "\n")
        self.proc.stdin.flush()
        for line in self.proc.stdout:
            if line.startswith("answer: "):
                return json.loads(line[len("answer: "):])
        raise AssertionError(f"the child ended without an answer:\n{self.proc.stderr.read()[-2000:]}")

    def close(self) -> str:
        """Ends the child; what it wrote on stderr."""
        _out, err = self.proc.communicate(input="", timeout=60)
        return err


def _env(tmp: Path) -> dict:
    return {**os.environ, "HF_HOME": str(tmp / "home"), "HF_DATASETS_CACHE": str(tmp / "cache"),
            "HF_HUB_CACHE": str(tmp / "hub"), "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1",
            "PYTHONPATH": str(ROOT)}


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """`tiny/prompts` in a Hugging Face datasets cache, as load_dataset leaves it after a download: built by the
    library's own JSON builder, kept where the library looks for it by name (<cache>/tiny___prompts/default/...)."""
    tmp = tmp_path_factory.mktemp("hf")
    src = tmp / "train.jsonl"
    src.write_text("".join(json.dumps({"question": p, "output_len": 5 + i}) + "\n" for i, p in enumerate(PROMPTS)))
    build = r"""
import os, shutil, sys
from datasets.packaged_modules.json.json import Json
b = Json(cache_dir=sys.argv[1] + "/build", dataset_name="prompts", hash="0123abcd", data_files={"train": sys.argv[2]})
b.download_and_prepare()
os.makedirs(sys.argv[1] + "/cache/tiny___prompts/default", exist_ok=True)
shutil.move(os.path.dirname(b.cache_dir), sys.argv[1] + "/cache/tiny___prompts/default/0.0.0")
from datasets import Dataset
Dataset.from_dict({"text": ["saved one", "saved two"]}).save_to_disk(sys.argv[1] + "/saved")
"""
    subprocess.run([sys.executable, "-c", build, str(tmp), str(src)], env=_env(tmp), check=True, cwd=ROOT,
                   capture_output=True, timeout=300)
    shutil.rmtree(tmp / "build")
    return tmp


@pytest.fixture(scope="module")
def child(cache):
    c = Child(_env(cache))
    yield c
    c.close()


def plan_of(child: Child, **desc) -> dict:
    return child.ask("plan", {"kind": "hub", **desc})


def test_a_cached_dataset_by_name_gives_its_rows_and_records_where_they_came_from(child):
    got = plan_of(child, dataset="tiny/prompts", n=4, how="first")
    assert got["prompts"] == PROMPTS[:4] and got["kind"] == "hub"
    assert got["max_tokens_each"] == [5, 6, 7, 8]  # its own answer-length column
    s = got["summary"]
    assert (s["kind"], s["dataset"], s["split"], s["rows"], s["sent"], s["sampling"]) == \
        ("hub", "tiny/prompts", "train", 12, 4, "first")
    assert s["name"] == "tiny/prompts:train" and s["fingerprint"] and s["input_tokens"]["max"] >= 1


def test_a_seeded_random_sample_is_the_same_for_a_seed(child):
    a, b = (plan_of(child, dataset="tiny/prompts", n=5, how="random", seed=3)["prompts"] for _ in range(2))
    other = plan_of(child, dataset="tiny/prompts", n=5, how="random", seed=4)["prompts"]
    assert a == b and a != other and set(a) < set(PROMPTS) and a == [p for p in PROMPTS if p in a]


def test_a_folder_saved_with_save_to_disk_is_read_too(cache, child):
    got = plan_of(child, dataset=str(cache / "saved"))
    assert got["prompts"] == ["saved one", "saved two"]


NOT_CACHED = ("The Hugging Face dataset {name} is not in this machine's cache ({cache}) and the Hub cannot be reached: "
              "load it once where the network reaches the Hub (it is kept in that cache), or give its rows as a file.")


@pytest.mark.parametrize("desc, template, shown", [
    ({"dataset": "tiny/absent"}, NOT_CACHED, {"name": "tiny/absent"}),
    ({"dataset": "tiny/prompts", "split": "test"}, "The dataset {name} has no split '{split}': pick one of {splits}.",
     {"name": "tiny/prompts", "split": "test"}),
    ({"dataset": "tiny/prompts", "column": "nope"}, "The dataset {name} has no column '{column}': pick one of "
                                                    "{columns}.", {"name": "tiny/prompts", "column": "nope"}),
    ({"dataset": "  "}, "Give the name of a Hugging Face dataset (owner/name), such as the one you would pass to "
                        "datasets.load_dataset.", {}),
])
def test_what_cannot_be_read_is_one_sentence(child, desc, template, shown):
    err = plan_of(child, **desc)["error"]
    assert "\n" not in err and "Traceback" not in err, err
    found = read(template, err)
    assert found is not None and {k: found[k] for k in shown} == shown, err


def cli(child: Child, *argv: str) -> dict:
    return child.ask("cli", list(argv))


def test_the_cli_sends_a_cached_hub_dataset_and_says_one_sentence_for_one_it_cannot_read(child):
    got = cli(child, "dataset-chat", "--hf-dataset", "tiny/prompts", "--num-prompts", "3", "--hf-column", "question",
              "--output-len", "7")
    assert got["prompts"] == PROMPTS[:3] and got["concurrency"] == 4  # the scenario's arrival stays
    assert (got["workload"]["kind"], got["workload"]["dataset"], got["workload"]["column"]) == \
        ("hub", "tiny/prompts", "question")
    absent = read(NOT_CACHED, cli(child, "concurrent-10", "--hf-dataset", "tiny/absent")["error"])
    assert absent["name"] == "tiny/absent", absent
    assert read("{flag} picks a part of a Hugging Face dataset: give --hf-dataset NAME with it.",
                cli(child, "concurrent-10", "--hf-split", "x")["error"]) == {"flag": "--hf-split"}
    both = read("{a} and {b} cannot go together: {why}. Give only one of them.",
                cli(child, "dataset-chat", "--dataset", "a.jsonl", "--hf-dataset", "tiny/prompts")["error"])
    assert (both["a"], both["b"]) == ("--hf-dataset", "--dataset"), both


def test_a_cached_dataset_is_read_at_once_when_offline_mode_is_off_and_the_hub_out_of_reach(cache):
    """Without HF_DATASETS_OFFLINE the library asked the Hub first for half a minute; the cache is read first."""
    env = {k: v for k, v in _env(cache).items() if k not in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE")}
    env["HF_ENDPOINT"] = "http://127.0.0.1:9"  # nothing listens there: the Hub is out of reach, on this machine
    online = Child(env)  # a child of its own: the library reads these settings once, when imported
    try:
        assert online.ask("plan", {"kind": "hub", "dataset": "tiny/prompts", "n": 2})["prompts"] == PROMPTS[:2]
    finally:
        err = online.close()
    assert "127.0.0.1" not in err  # never asked the (unreachable) Hub
