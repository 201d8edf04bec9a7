"""A fixed-text workload cut from the user's own text file (the CLI's --fixed-text FILE, the Load test
page's upload): checked as every workload file is (size, binary, UTF-8, long enough for its shared opening), each
problem one sentence; a repeat or a sweep's level cuts other prompts from the same text, never the shipped one;
and the Python behind a fixed-text or a Hugging Face dataset run sends that workload."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from engine.measure.workloads import kinds, seeds
from engine.measure.workloads.base import WorkloadError
from tests.conftest import app_page, cli_in_process
from tests.said import read

OWN = "\n".join(f"Line {i} of a text of my own about serving models, batching and queues." for i in range(60))
SHIPPED = (Path(__file__).resolve().parent.parent / "examples" / "workloads" / "fixed-text.txt").read_text()


@pytest.mark.parametrize("data, says", [
    (b"caf\xe9 au lait\n" * 40, "mine.txt is not UTF-8 text (byte 4): save it as UTF-8"),
    (b"a\x00b" * 40, "mine.txt is a binary file, not text: give a plain text file (.txt) of lines of prose."),
    (b"\n \n", "mine.txt holds no text: give a file of lines of text."),
    (b"one short line\n", "mine.txt holds 4 tokens, no more than the shared opening's 128: give a longer text"),
])
def test_a_bad_text_is_one_sentence(data, says):
    with pytest.raises(WorkloadError) as e:
        kinds.plan_of({"kind": "fixed-text", "file": "mine.txt", "n": 2}, data=data)
    assert says in str(e.value), str(e.value)


def test_prompts_come_from_the_users_text_and_another_seed_cuts_them_from_it_again():
    plan = kinds.plan_of({"kind": "fixed-text", "file": "mine.txt", "n": 4, "input_len": 60, "prefix_len": 20,
                          "seed": 1}, data=OWN.encode())
    assert all(p.startswith("Line 0 of a text of my own") for p in plan.prompts)
    assert plan.summary["file"] == "mine.txt" and plan.summary["lines"] == 60 and "Line 0" not in str(plan.summary)
    from engine.measure.workloads.scenarios import get

    spec = plan.apply(get("concurrent-10").load_spec(max_tokens=16))
    spec = seeds.reseed(spec, 1)  # as made: its prompt seed
    again = seeds.reseed(spec, 2)
    assert again.prompts != spec.prompts and all(p.startswith("Line 0 of a text of my own") for p in again.prompts)
    assert again.workload["seed"] == 2 and again.workload["file"] == "mine.txt"


def test_the_cli_cuts_prompts_from_the_file_given_and_says_a_bad_one(tmp_path):
    bad = tmp_path / "latin.txt"
    bad.write_bytes(b"caf\xe9\n" * 50)
    p = cli_in_process("run", "fixed-text", "--url", "http://127.0.0.1:9", "--fixed-text", str(bad))
    assert p.returncode == 2 and p.stderr.startswith("error: ") and p.stderr.count("\n") == 1, p.stderr  # one line
    assert read("{name} is not UTF-8 text (byte {at}): save it as UTF-8 and upload it again.", p.stderr) == {
        "name": "latin.txt", "at": "4"}, p.stderr
    p = cli_in_process("run", "fixed-text", "--url", "http://127.0.0.1:9", "--fixed-text", str(tmp_path / "no.txt"))
    assert p.returncode == 2 and read("{path} does not exist: give the path of a text file.", p.stderr) == {
        "path": str(tmp_path / "no.txt")}, p.stderr


def test_the_page_previews_prompts_cut_from_an_uploaded_text(lab):
    at = app_page("app_pages/load.py")
    at.selectbox(key="load_what").set_value("Fixed text").run()
    at.selectbox(key="wl_fixed-text_file").set_value("Upload a file").run()
    assert any("Upload a file, or pick a shipped one." in i.value for i in at.info)  # not the shipped text meanwhile
    at.number_input(key="wl_ft_prefix").set_value(20)
    at.number_input(key="wl_ft_len").set_value(60)
    at.file_uploader(key="wl_fixed-text_upload").set_value(("mine.txt", OWN.encode(), "text/plain")).run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert all(p.startswith("Line 0 of a text of my own") for p in at.dataframe[0].value["Prompt"])
    at.file_uploader(key="wl_fixed-text_upload").set_value(("bad.txt", b"caf\xe9\n" * 50, "text/plain")).run()
    errors = [e.value.replace("\\", "") for e in at.error]
    assert len(errors) == 1 and "bad.txt is not UTF-8 text (byte 4)" in errors[0], errors
    assert next(b for b in at.button if b.label == "Run load test").disabled


def _run_of(plan, **load):
    from engine.measure.workloads.scenarios import get
    from engine.results.records import RunResult

    spec = plan.apply(get("concurrent-10").load_spec(base_url="http://127.0.0.1:8000", model="m", max_tokens=16))
    return RunResult(kind="vllm", scenario=plan.kind, label="x", records=[], duration=1.0, started_at=1.76e9,
                     model="m", load={**spec.as_dict(), **load})


def test_the_python_behind_a_fixed_text_run_reads_the_same_text_and_cuts_prompts_of_about_its_length(tmp_path):
    from engine.measure.snippets.load import run_code

    plan = kinds.plan_of({"kind": "fixed-text", "n": 5, "input_len": 60, "prefix_len": 20, "output_len": 8,
                          "seed": 3})
    code = run_code(_run_of(plan))
    assert code is not None
    ast.parse(code)
    assert "fixed-text.txt" in code and "N, rng = 5, random.Random(3)" in code and "LENGTHS = [8] * N" in code, code
    made = _prompts_of(code)
    assert len(made) == 5 and all(p.startswith(SHIPPED.splitlines()[0][:40]) for p in made)
    assert all(abs(len(p) / 4 - 60) <= 2 for p in made)  # about its 60 tokens, 4 characters a token


def _prompts_of(code: str) -> list[str]:
    """PROMPTS as the code makes them: its lines up to the client's first request, run here (no server needed)."""
    head = code.split("async def ")[0].replace("client = AsyncOpenAI(", "client = None and AsyncOpenAI(")
    scope: dict = {}
    exec(compile(head, "<snippet>", "exec"), scope)  # noqa: S102 - the snippet the page shows, nothing sent
    return scope["PROMPTS"]


def test_the_python_behind_a_hugging_face_dataset_run_loads_the_same_rows(tmp_path):
    import datasets
    from engine.measure.snippets.load import run_code

    folder = tmp_path / "qa"
    datasets.Dataset.from_dict({"question": [f"Question {i}?" for i in range(12)]}).save_to_disk(str(folder))
    plan = kinds.plan_of({"kind": "hub", "dataset": str(folder), "n": 5, "how": "random", "seed": 7})
    code = run_code(_run_of(plan))
    assert code is not None
    ast.parse(code)
    assert f"load_from_disk({str(folder)!r})".replace("'", '"') in code, code
    assert _prompts_of(code) == plan.prompts


def test_the_python_behind_a_workload_run_sends_its_request_shape_too():
    from engine.measure.snippets.load import run_code
    from engine.measure.load.spec import LoadSpec

    plan = kinds.plan_of({"kind": "fixed-text", "n": 3, "input_len": 60, "prefix_len": 20, "output_len": 8})
    shape = LoadSpec(base_url="http://x", model="m", prompts=["-"], sampling={"top_p": 0.5, "min_p": 0.1},
                     headers={"X-Team": "sk-not-here"}, extra_body={"seed": 2}).as_dict()
    code = run_code(_run_of(plan, **{k: shape[k] for k in ("sampling", "headers", "extra_body")}))
    assert code is not None
    ast.parse(code)
    assert 'HEADERS = {"X-Team": os.environ["X_TEAM"]}' in code and "top_p=0.5, extra_headers=HEADERS" in code
    assert 'extra_body={"ignore_eos": True, "min_p": 0.1, "seed": 2})' in code and "sk-not-here" not in code, code
