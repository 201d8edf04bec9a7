"""The Load test page shows its own runs and tells the warm-up from the run (before anything ran it
showed the Naive page's "5 at once" run under its own form; during a run the warm-up was drawn as if it were
the measured part). The job's warm-up state from the progress protocol, and the page with AppTest."""
from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from engine.jobs import Job, JobManager
from engine.measure.progress import RunPlan
from engine.results.records import RequestRecord
from tests.conftest import app_page, wait_done
from tests.said import read, shown

APP = str(Path(__file__).resolve().parent.parent / "app.py")


def plan(warmup: int) -> RunPlan:
    return RunPlan(label="10 at once", shape="burst", num_requests=10, warmup=warmup, concurrency=10, workers=1,
                   url="http://x", model="m")


def test_a_job_knows_while_it_warms_up_and_keeps_the_warmup_out_of_its_live_records():
    job = Job(kind="load", label="10 at once")
    job.on_start(plan(warmup=3))
    assert job.warming and (job.warmup_total, job.warmup_done) == (3, 0)
    for i in range(3):
        w = RequestRecord(index=i, prompt="(warm-up)", send_time=0.0, warmup=True)
        job.on_request_sent(w)
        job.on_request_done(w)
    assert job.warmup_done == 3 and job.live_records() == [] and job.done == 0
    job.on_clock(time.time())  # the measured part begins
    assert not job.warming
    first = RequestRecord(index=0, prompt="p", send_time=0.0)
    job.on_request_sent(first)
    assert job.live_records() == [first]
    cold = Job(kind="load", label="no warm-up")
    cold.on_start(plan(warmup=0))
    assert not cold.warming


def test_while_warming_up_the_page_says_so_and_draws_no_timeline(lab):
    jobs, lab.jobs = lab.jobs, JobManager()
    release = threading.Event()

    def warming(job):
        job.on_start(plan(warmup=10))
        release.wait(60)

    try:
        lab.jobs.submit("load", "10 requests at once", warming, scenario="concurrent-10")
        time.sleep(0.2)
        at = app_page("app_pages/load.py")
        assert shown("Warming up: one batch as big as the measured one goes first and is left out of the numbers. The "
                     "timeline starts when the measured requests are sent.", [i.value for i in at.info]) == [{}]
        texts = [p.text for p in at.get("progress")] if at.get("progress") else []
        warming = shown("{label}: warming up, {done}/{total} warm-up requests done (not counted)", texts)
        assert [(w["done"], w["total"]) for w in warming] == [("0", "10")], texts
        assert not at.get("plotly_chart")  # no timeline of a run that has not started
    finally:
        release.set()
        lab.jobs = jobs


def test_a_naive_page_run_is_not_shown_as_this_page_s_result(lab):
    from tests.test_naive_page import make_vllm_batch

    jobs, lab.jobs = lab.jobs, JobManager()
    try:
        job = lab.jobs.submit("load", "vLLM, the same 5 prompts at once", lambda job: make_vllm_batch(),
                              scenario="vllm-5-batch")
        while job.active:
            time.sleep(0.05)
        at = app_page("app_pages/load.py")
        assert not [m for m in at.metric if m.label == "Wall time"] and not at.get("plotly_chart")
        assert any("Run load test" in i.value for i in at.info)
    finally:
        lab.jobs = jobs


# -- what to send: each workload kind chosen on the page, its preview, a bad upload, two real runs ------

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "workloads"


def _what(at: AppTest, choice: str) -> AppTest:
    at.selectbox(key="load_what").set_value(choice).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _histogram(at: AppTest) -> dict:
    """The length histogram's figure as the page sent it (the preview's only chart before a run)."""
    import json

    charts = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    hist = [c for c in charts if c["data"] and c["data"][0]["type"] == "histogram"]
    assert len(hist) == 1, [c["layout"].get("title") for c in charts]
    return hist[0]


def _first_prompts(n: int) -> list[str]:
    import json

    lines = (EXAMPLES / "chat-prompts.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["prompt"] for line in lines[:n]]


def test_the_lab_s_prompts_stay_the_default_with_no_preview(lab):
    at = app_page("app_pages/load.py")
    assert at.selectbox(key="load_what").value == "The lab's 10 prompts"
    assert not at.dataframe and not at.get("plotly_chart") and not at.get("file_uploader")


def test_a_dataset_previews_its_first_rows_and_the_histogram_of_what_it_sends(lab):
    at = _what(app_page("app_pages/load.py"), "A dataset")
    at.number_input(key="wl_ds_n").set_value(12)
    at.radio(key="wl_ds_how").set_value("first").run()
    df = at.dataframe[0].value
    assert list(df["Prompt"]) == _first_prompts(8)  # the sample: the file's own first rows
    fig = _histogram(at)
    assert len(fig["data"][0]["x"]) == 12 and list(df["Tokens"]) == fig["data"][0]["x"][:8]
    assert "12 requests" in fig["layout"]["title"]["text"]


def test_a_length_distribution_previews_exactly_its_lengths(lab):
    at = _what(app_page("app_pages/load.py"), "Length distribution")
    at.number_input(key="wl_len_n").set_value(6)
    at.number_input(key="wl_in_mean").set_value(100)
    at.number_input(key="wl_out_mean").set_value(20).run()
    fig = _histogram(at)
    assert fig["data"][0]["x"] == [100] * 6 and fig["data"][1]["x"] == [20] * 6  # prompts, answers
    assert list(at.dataframe[0].value["Tokens"]) == [100] * 6
    # the answers are held to the drawn lengths: no max-tokens slider says otherwise
    assert "Max tokens per answer" not in {s.label for s in at.slider if s.key != "pair_tokens"}
    held = shown("Each answer runs to the length the workload gives it (up to {n} tokens).",
                 [c.value for c in at.caption])
    assert held and all(x == {"n": "20"} for x in held), held  # the load test's, and the pair's below it
    at.selectbox(key="wl_in_kind").set_value("Uniform range").run()
    at.number_input(key="wl_in_low").set_value(10)
    at.number_input(key="wl_in_high").set_value(30).run()
    assert all(10 <= x <= 30 for x in _histogram(at)["data"][0]["x"])


def test_multi_turn_chats_preview_their_turns(lab):
    import json

    at = _what(app_page("app_pages/load.py"), "Multi-turn chats")
    at.number_input(key="wl_mt_convs").set_value(3)
    at.number_input(key="wl_mt_turns").set_value(2).run()
    df = at.dataframe[0].value
    chats = json.loads((EXAMPLES / "conversations.json").read_text(encoding="utf-8"))
    firsts = [[t["value"] for t in c["conversations"] if t["from"] == "human"] for c in chats[:3]]
    assert list(df.columns) == ["Turn 1", "Turn 2"] and list(df["Turn 1"]) == [f[0] for f in firsts]
    fig = _histogram(at)
    assert len(fig["data"][0]["x"]) == 3 and "6 requests" in fig["layout"]["title"]["text"]


def test_a_trace_previews_its_rows_lengths_and_says_the_arrival_does_not_apply(lab):
    import json

    at = _what(app_page("app_pages/load.py"), "Trace replay")
    rows = [json.loads(line) for line in (EXAMPLES / "tiny-trace.jsonl").read_text().splitlines() if line.strip()]
    fig = _histogram(at)
    assert fig["data"][0]["x"] == [r["input_length"] for r in rows]  # counted with the model's own tokenizer
    assert fig["data"][1]["x"] == [r["output_length"] for r in rows]
    assert any("the arrival above does not apply" in c.value for c in at.caption)


def test_an_uploaded_dataset_is_what_the_preview_shows(lab):
    at = _what(app_page("app_pages/load.py"), "A dataset")
    at.selectbox(key="wl_dataset_file").set_value("Upload a file").run()
    rows = ["Why is the sky blue?", "Name three prime numbers.", "What is vLLM?"]
    data = "".join(f'{{"text": "{r}"}}\n' for r in rows).encode()
    at.file_uploader(key="wl_dataset_upload").set_value(("mine.jsonl", data, "application/json")).run()
    assert not at.exception and not at.error
    assert list(at.dataframe[0].value["Prompt"]) == rows
    assert "3 requests" in _histogram(at)["layout"]["title"]["text"]


@pytest.mark.parametrize("data, says", [
    (b"\x00\x01\x02binary\xff\xfe", "is a binary file, not text"),
    (b'{"answer": "no prompt here"}\n', "prompt"),
])
def test_a_bad_upload_shows_its_one_sentence_and_runs_nothing(lab, data, says):
    jobs, lab.jobs = lab.jobs, JobManager()
    try:
        at = _what(app_page("app_pages/load.py"), "A dataset")
        at.selectbox(key="wl_dataset_file").set_value("Upload a file").run()
        at.file_uploader(key="wl_dataset_upload").set_value(("bad.jsonl", data, "application/json")).run()
        assert not at.exception
        errors = [e.value for e in at.error]
        assert len(errors) == 1 and says in errors[0].replace("\\", "") and "\n" not in errors[0], errors
        assert next(b for b in at.button if b.label == "Run load test").disabled and not at.dataframe
        assert lab.latest_job("load") is None
    finally:
        lab.jobs = jobs


def test_history_names_each_run_s_workload_and_leaves_older_runs_blank(lab):
    from engine.results.records import RequestRecord, RunResult

    recs = [RequestRecord(index=0, prompt="p", send_time=0.0, first_token_time=0.1, chunk_times=[0.1], end_time=0.2)]
    base = dict(kind="vllm", records=recs, duration=0.3, started_at=time.time(), model="m")
    with_file = RunResult(scenario="dataset", label="with a dataset", **base,
                          load={"workload": {"kind": "dataset", "name": "mine.jsonl", "rows": 3}})
    older = RunResult(scenario="concurrent-1", label="an older run", **base)
    for r in (with_file, older):
        lab.store.save(r)
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    at.switch_page("app_pages/history.py").run()
    assert not at.exception
    df = at.dataframe[0].value.set_index("run")
    assert df.loc["with a dataset", "workload"] == "dataset · mine.jsonl"
    assert df.loc["an older run", "workload"] == ""


def _connected(lab, server) -> None:
    wait_done(lab.connect(server.base_url), 60)


def _ran(lab, at: AppTest):
    next(b for b in at.button if b.label == "Run load test").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    job = lab.latest_job("load")
    wait_done(job)
    at.run()
    assert not at.exception
    return job.result


@pytest.mark.server
def test_a_dataset_runs_through_the_page_on_poisson_arrivals_and_says_the_client_kept_its_schedule(lab, vllm_server):
    _connected(lab, vllm_server)
    try:
        at = _what(app_page("app_pages/load.py"), "A dataset")
        at.radio(key="load_arrival").set_value("At a rate").run()
        at.number_input(key="wl_ds_n").set_value(4)
        at.radio(key="wl_ds_how").set_value("first").run()
        next(w for w in at.slider if w.label == "Max tokens per answer").set_value(16)
        run = _ran(lab, at)
        assert [r.prompt for r in run.measured] == _first_prompts(4)
        assert run.load.workload["kind"] == "dataset" and run.load.workload["name"] == "chat-prompts.jsonl"
        assert any(m.label == "OK / failed" and m.value == "4 / 0" for m in at.metric)
        # as shown, markdown's characters escaped ("schedule\: 1 of 4", ui.plain): the late sentence has a colon
        said = [x.value.replace("\\", "") for x in (*at.caption, *at.warning)]
        # judge.lateness's sentence for this run: on time, or (a loaded machine) behind its schedule
        from engine.measure.judge import lateness

        expected = lateness.said(run.extra)
        assert expected is not None and run.extra.lateness.planned_sends == 4
        assert any(str(expected)[:40] in s for s in said), (str(expected), said)
    finally:
        lab.detach()


@pytest.mark.server
def test_a_multi_turn_chat_runs_through_the_page_and_draws_ttft_per_turn(lab, vllm_server):
    import json

    _connected(lab, vllm_server)
    try:
        at = _what(app_page("app_pages/load.py"), "Multi-turn chats")
        at.number_input(key="wl_mt_convs").set_value(2)
        at.number_input(key="wl_mt_turns").set_value(3).run()
        next(w for w in at.slider if w.label == "Max tokens per answer").set_value(16)
        run = _ran(lab, at)
        assert sorted((r.conversation, r.turn) for r in run.measured) == [(c, t) for c in range(2) for t in range(3)]
        charts = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
        per_turn = [c for c in charts if "TTFT per turn" in c["layout"]["title"]["text"]]
        assert per_turn and per_turn[0]["data"][0]["x"] == [1, 2, 3]
    finally:
        lab.detach()


def test_synthetic_prompts_have_a_seed_field_and_a_new_seed_each_run_unless_one_is_given(lab):
    """Once, the Load test's synthetic prompts were always seed 0, so a second run found them in the prefix
    cache. The form takes a seed (empty: a new one each run); the prompts the lab's own are not seeded."""
    from engine.measure.workloads.defaults import load_test_spec

    at = app_page("app_pages/load.py")
    assert at.number_input(key="load_seed").disabled  # the lab's 10 prompts: nothing to seed
    at = _what(at, "Synthetic prompts (seeded)")
    seed = at.number_input(key="load_seed")
    assert not seed.disabled and seed.value is None and "a new one each run" in seed.proto.placeholder
    fresh = [load_test_spec("burst", 6, 16, max_len=2048, synthetic=True) for _ in range(2)]
    assert fresh[0].prompt_seed != fresh[1].prompt_seed and fresh[0].prompts != fresh[1].prompts
    fixed = [load_test_spec("burst", 6, 16, max_len=2048, synthetic=True, seed=9) for _ in range(2)]
    assert fixed[0].prompts == fixed[1].prompts and fixed[0].prompt_seed == 9
    assert load_test_spec("burst", 6, 16, max_len=2048).prompt_seed is None  # the lab's prompts


def test_shared_prefixes_preview_their_lengths_what_the_cache_can_serve_and_take_the_seed(lab):
    """The prefix-repetition workload chosen on the page, previewed as the other kinds are (its
    prompts, their exact lengths, the histogram) with what a prefix cache can serve of it; seeded like synthetic
    prompts; a bad setting its one sentence, and nothing runs."""
    from engine.measure.workloads.defaults import load_test_spec, workload_plan

    at = _what(app_page("app_pages/load.py"), "Shared prefixes")
    at.number_input(key="wl_pr_n").set_value(6)
    at.number_input(key="wl_pr_k").set_value(2)
    at.number_input(key="wl_pr_prefix").set_value(40)
    at.number_input(key="wl_pr_suffix").set_value(10)
    at.number_input(key="wl_pr_out").set_value(12).run()
    assert not at.exception, [e.value for e in at.exception]
    fig = _histogram(at)
    assert fig["data"][0]["x"] == [50] * 6 and fig["data"][1]["x"] == [12] * 6
    assert list(at.dataframe[0].value["Tokens"]) == [50] * 6
    assert any("A prefix cache can serve up to 53%" in m.value for m in at.markdown)  # 4 × 40 of 6 × 50 tokens
    assert not at.number_input(key="load_seed").disabled
    plan = workload_plan({"kind": "prefix-repetition", "n": 6, "num_prefixes": 2, "prefix_len": 40, "suffix_len": 10,
                          "output_len": 12, "seed": 0})
    a, b = (load_test_spec("concurrency", 6, 12, max_len=2048, concurrency=2, plan=plan, seed=s) for s in (3, 4))
    assert a.prompt_seed == 3 and a.workload["seed"] == 3 and a.prompts != b.prompts and len(a.prompts) == 6
    assert a.scenario == "prefix-repetition"
    at.number_input(key="wl_pr_k").set_value(9).run()
    assert any("9 prefixes for 6 requests" in e.value for e in at.error)
    assert next(b for b in at.button if b.label == "Run load test").disabled


def test_a_fixed_text_previews_prompts_of_its_length_cut_from_the_text(lab):
    at = _what(app_page("app_pages/load.py"), "Fixed text")
    at.number_input(key="wl_ft_n").set_value(4)
    at.number_input(key="wl_ft_len").set_value(90)
    at.number_input(key="wl_ft_prefix").set_value(30)
    at.number_input(key="wl_ft_out").set_value(8).run()
    assert not at.exception, [e.value for e in at.exception]
    fig = _histogram(at)
    assert fig["data"][0]["x"] == [90] * 4 and fig["data"][1]["x"] == [8] * 4
    first = (EXAMPLES / "fixed-text.txt").read_text(encoding="utf-8").splitlines()[0]
    assert all(p.startswith(first[:60]) for p in at.dataframe[0].value["Prompt"])
    assert not at.number_input(key="load_seed").disabled
    at.number_input(key="wl_ft_prefix").set_value(90).run()
    opening = [read("The shared opening is a whole number of tokens from 0 to one less than the prompt's {n}, not {v}: "
                    "the rest of each prompt is its own.", e.value.replace("\\", "")) for e in at.error]
    assert {"n": "90", "v": "90"} in opening, [e.value for e in at.error]
    assert next(b for b in at.button if b.label == "Run load test").disabled


def test_a_hugging_face_dataset_by_name_previews_its_rows_and_says_what_it_lacks(lab, tmp_path):
    """A Hugging Face dataset chosen by name on the page (here a folder written by save_to_disk, which
    the library reads without the Hub), previewed like a file; one it cannot find is its one sentence."""
    from datasets import Dataset

    Dataset.from_dict({"instruction": [f"Say {i} in Korean." for i in range(6)]}).save_to_disk(str(tmp_path / "ds"))
    at = _what(app_page("app_pages/load.py"), "A Hugging Face dataset")
    assert any("Type the name of a Hugging Face dataset" in i.value for i in at.info)
    at.text_input(key="wl_hub_name").set_value(str(tmp_path / "ds"))
    at.text_input(key="wl_hub_column").set_value("instruction")
    at.number_input(key="wl_hub_n").set_value(4)
    at.radio(key="wl_hub_how").set_value("first").run()
    assert not at.exception, [e.value for e in at.exception]
    assert list(at.dataframe[0].value["Prompt"]) == [f"Say {i} in Korean." for i in range(4)]
    assert "4 requests" in _histogram(at)["layout"]["title"]["text"]
    at.text_input(key="wl_hub_column").set_value("nope").run()
    column, = shown("The dataset {name} has no column '{column}': pick one of {columns}.",
                    [e.value.replace("\\", "") for e in at.error])
    assert column["column"] == "nope" and column["columns"].startswith("instruction"), column
    assert next(b for b in at.button if b.label == "Run load test").disabled
