"""The HTML report (engine.figures.report): what an attendee mails to a colleague. Runs with known values
are saved to a history of this test's own; the report must carry each run's label, machine, flags and
numbers, point nowhere outside itself, say a hostile label as text and leave every secret out. The
last test opens the report of a real run in headless Chromium with the network blocked."""
from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from engine.cli import main
from engine.digits import significant
from engine.figures.report import build_report, report_html
from engine.messages import mark, translate
from engine.results.store import RunStore

from .conftest import ROOT
from .said import read, shown
from .test_store import make_run

HOSTILE = "<script>alert(1)</script><img src=x onerror=alert(2)>"
SECRET, URL_SECRET = "sk-live-0123456789abcdef", "sk-url-fedcba9876543210"


def gpu_run():
    """A run on a GPU server this app started, with a key in its flags, command and URL."""
    run = make_run(1_764_500_000.0, "vLLM, 4 at once")
    run.config = {"model": "/models/SmolLM2-135M-Instruct", "max_model_len": 1536, "gpu_memory_utilization": 0.77,
                  "max_num_seqs": 48, "dtype": "float16", "device": "cuda", "tensor_parallel_size": 1,
                  "extra_args": ["--seed", "7", "--api-key", SECRET]}
    run.command = f"vllm serve /models/SmolLM2-135M-Instruct --max-model-len 1536 --api-key {SECRET}"
    run.load.base_url = f"http://lab:{URL_SECRET}@10.0.0.5:8000/v1?api_key={URL_SECRET}"
    run.hardware = {"accelerator": "gpu", "gpus": [{"index": 0, "name": "NVIDIA H200", "memory_total_gb": 150.8}],
                    "cpu": {"model": "Intel(R) Xeon(R) Platinum", "usable_cores": 16, "ram_total_gb": 135.1}}
    return run


def cpu_run():
    """A run against a server at a URL (no flags known), with a hostile label and a measured CPU bandwidth."""
    run = make_run(1_764_500_100.0, HOSTILE)
    run.hardware = {"accelerator": "cpu", "gpus": [], "cpu": {
        "model": "AMD EPYC 7B13", "usable_cores": 2, "ram_total_gb": 25.3,
        "memory_bandwidth": {"gb_s": 21.3, "source": "measured", "reference": "copy benchmark: numpy, 256 MB"}}}
    run.config, run.command = {}, ""
    run.load.base_url = "http://127.0.0.1:8765"
    return run


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("SERVING_LAB_DB", str(tmp_path / "history.sqlite"))  # the command's, read where it starts
    store = RunStore(tmp_path / "history.sqlite")
    for run in (gpu_run(), cpu_run()):
        store.save(run)
    return store


@pytest.fixture
def report(store) -> tuple[list, str]:
    runs = [store.load(r.id) for r in reversed(store.list())]
    return runs, build_report(runs, "en")


def _texts(report: str) -> list[str]:
    """A report's text as a reader sees it: each element's text, its entities undone (no scripts, no styles)."""
    visible = re.sub(r"<(script|style)\b.*?</\1>", " ", report, flags=re.S)
    return [t for part in re.split(r"<[^>]+>", visible) if (t := html.unescape(part).strip())]


class Tags(HTMLParser):
    """Every start tag with its attributes."""

    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def tags(text: str) -> list[tuple[str, dict]]:
    parser = Tags()
    parser.feed(text)
    return parser.tags


def test_each_run_has_its_label_machine_flags_and_numbers(report):
    runs, text = report
    assert "vLLM, 4 at once" in text and "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    # the machine, with the bandwidth and where the figure came from (an H200's from the datasheet table)
    assert "NVIDIA H200" in text and "4,800.0 GB/s (table: NVIDIA datasheet)" in text
    assert "AMD EPYC 7B13" in text and "21.3 GB/s (measured: copy benchmark)" in text
    # the flags the GPU run's server started with; the URL run's are its server's own
    for flag, value in (("--max-model-len", "1536"), ("--gpu-memory-utilization", "0.77"), ("--max-num-seqs", "48")):
        assert re.search(rf"<th>{flag}</th><td>{value}</td>", text), flag
    assert "--seed 7" in text and "which kept its own flags" in text
    # the numbers History and the Load test show, as the summary holds them
    for run in runs:
        s = run.summary
        assert f"{significant(s.output_throughput)} tok/s" in text and f"{s.completed} / {s.failed}" in text
        assert f"<td>{s.get('mean_ttft_ms'):,.0f}</td>" in text and f"<td>{s.get('p99_e2el_ms'):,.0f}</td>" in text
    assert text.count("<section class='run'") == 2 and "Runs compared" in text


def test_a_naive_run_shows_its_transformers_settings():
    run = make_run(label="Naive transformers (sequential)", kind="naive")
    run.config = {"model": "SmolLM2-135M-Instruct", "mode": "sequential", "max_new_tokens": 200,
                  "sampling": {"do_sample": True, "temperature": 0.7}}
    text = build_report([run], "en")
    assert "<h3>Settings</h3>" in text and "Server flags" not in text and "Runs compared" not in text
    assert "<th>max_new_tokens</th><td>200</td>" in text and "do_sample=True, temperature=0.7" in text


def test_nothing_in_it_is_fetched_from_the_network(report):
    _, text = report
    found = tags(text)
    scripts = [a for t, a in found if t == "script"]
    assert scripts and not any("src" in a for a in scripts)  # plotly.js is inside the file
    assert not [t for t, _ in found if t in ("link", "iframe", "object", "embed", "base")]
    remote = [(t, a) for t, a in found for k, v in a.items()
              if k in ("src", "href", "srcset", "action", "poster") and re.match(r"\s*(https?:)?//", v or "")]
    assert not remote
    assert not re.search(r"@import|url\(\s*['\"]?(https?:)?//", text.split("<script", 1)[0])  # the stylesheet
    # plotly.js once, one call per chart, and one chart div for each call
    assert text.count("plotly.js v") == 1 and text.count("Plotly.newPlot(") == text.count("class=\"plotly-graph-div\"")
    assert len(scripts) == 1 + text.count("Plotly.newPlot(")


def test_a_hostile_label_stays_text(report):
    _, text = report
    assert HOSTILE not in text and "<img src=x" not in text
    # outside plotly.js, the only scripts are the charts' own calls (their data escapes "<" as \u003c)
    assert len([t for t, _ in tags(text) if t == "script"]) == 1 + text.count("Plotly.newPlot(")
    assert not [a for t, a in tags(text) if t == "img"]


def test_secrets_are_left_out(report):
    """From the history (which never stores one) and from a run handed over as it was measured alike."""
    run = gpu_run()
    run.label = f"see http://lab:{URL_SECRET}@10.0.0.5:8000"
    for text in (report[1], build_report([run, cpu_run()], "en")):
        assert SECRET not in text and URL_SECRET not in text
        assert "--api-key $VLLM_API_KEY" in text


def test_it_is_said_in_the_viewers_language(store):
    runs = [store.load(r.id) for r in store.list()]
    korean = translate(mark("Output throughput"), "ko")
    assert korean != "Output throughput"  # the catalogue is compiled (pybabel compile)
    text = build_report(runs, "ko")
    assert "<html lang='ko'>" in text and korean in text


def test_the_cli_writes_the_file(store, tmp_path, capsys):
    out = tmp_path / "report.html"
    ids = [r.id for r in store.list()]
    assert main(["report", *ids, "-o", str(out)]) == 0
    text = out.read_text()
    assert "vLLM, 4 at once" in text and "&lt;script&gt;" in text and SECRET not in text


def test_the_cli_refuses_an_unknown_run_in_one_sentence(store, tmp_path, capsys):
    out = tmp_path / "report.html"
    assert main(["report", store.list()[0].id, "nope", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err  # one line
    assert read("No run {run_id!r} in the history; it may have been deleted.", err) == {"run_id": "'nope'"}, err
    assert not out.exists()


def test_a_run_deleted_after_it_was_picked_is_named_not_a_failed_download(store):
    """History builds the report when the button is pressed: a run deleted since the page was drawn is
    said in the report, and the others are in it."""
    from engine.results.history import History

    keep, gone = [r.id for r in store.list()][:2]
    store.delete([gone])
    text = report_html(History(store), [keep, gone])
    import html

    assert f"so not in it: {gone}." in text
    assert html.escape(store.load(keep).label) in text


@pytest.mark.server
@pytest.mark.e2e
def test_a_real_runs_report_draws_its_charts_with_the_network_blocked(vllm_server, tmp_path):
    """A run against the real server, its report written by the CLI, opened in Chromium where every request
    that is not for a file is refused: the charts still draw."""
    from playwright.sync_api import sync_playwright

    from .browser import launch_chromium

    env = {"SERVING_LAB_DB": str(tmp_path / "history.sqlite")}
    run = subprocess.run([sys.executable, "-m", "engine", "run", "vllm-5-sequential", "--url", vllm_server.base_url,
                          "--max-tokens", "8"], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={**os.environ, **env})
    assert run.returncode == 0, run.stderr
    run_id = re.search(r"^saved as run (\w+) ", run.stdout, re.M).group(1)  # what `run` says to pass to `report`
    assert run_id == RunStore(tmp_path / "history.sqlite").list()[0].id
    out = tmp_path / "report.html"
    rep = subprocess.run([sys.executable, "-m", "engine", "report", run_id, "-o", str(out)], cwd=ROOT,
                         capture_output=True, text=True, timeout=120, env={**os.environ, **env})
    assert rep.returncode == 0, rep.stderr
    refused = []

    def only_files(route):
        if route.request.url.startswith("file://"):
            route.continue_()
        else:
            refused.append(route.request.url)
            route.abort()

    with sync_playwright() as p:
        browser = launch_chromium(p)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.route("**/*", only_files)
            errors = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(Path(out).as_uri())
            page.wait_for_selector(".plot-container svg.main-svg", timeout=30_000)
            charts = page.locator(".plotly-graph-div").count()
            drawn = page.locator(".plotly-graph-div .plot-container").count()
        finally:
            browser.close()
    assert charts >= 3 and drawn == charts, (charts, drawn)
    assert not errors and not refused, (errors, refused)


def test_repeats_and_a_pair_are_said_with_their_spread_and_verdicts():
    """The report compared repeated runs only bar by bar. Now each set of repeats is its median and range
    (a repeat 3.5× off flagged), two sets of one label are told apart and judged, and a pair's servers judged."""
    def repeated(group: str, start: float, values) -> list:
        runs = []
        for i, v in enumerate(values):
            r = make_run(start + i, "concurrent-4")
            r.summary.output_throughput = v
            r.extra.repeat.group, r.extra.repeat.index, r.extra.repeat.total = group, i + 1, len(values)
            runs.append(r)
        return runs

    runs = repeated("g1", 1_764_500_000.0, [100.0, 104.0, 29.0]) + repeated("g2", 1_764_500_600.0, [101.0, 99.0, 103.0])
    page = _texts(build_report(runs, "en"))
    spread = shown("{run}, {metric}: {spread}", page)[0]  # the first set's throughput, its outlier, then the sets
    assert (spread["run"], spread["metric"]) == ("concurrent-4", "Output throughput")
    assert read("median {median}, {spread}", spread["spread"])["median"] == "100"
    assert read("range {low}–{high} of {n} runs", spread["spread"]) == {"low": "29", "high": "104", "n": "3"}
    assert shown("repeat {i} ({value}) is {x}× below the median: something else may have run then; repeat the test or "
                 "check the machine.", page) == [{"i": "3", "value": "29", "x": "3.4"}]
    within = "{name}: no measurable difference on this machine between {a} and {b} (measured {effect}; {interval}, " \
             "which holds no change; {how})."
    sets = shown(within, page)
    assert sets and sets[0]["name"] == "Output throughput" and sets[0]["a"].startswith("concurrent-4 from "), sets
    a, b = make_run(1_764_500_000.0, "A: here"), make_run(1_764_500_000.0, "B: there")
    a.extra.side_by_side.pair = b.extra.side_by_side.pair = "p1"
    pair = _texts(build_report([a, b], "en"))
    assert ("Mean TTFT", "A: here", "B: there") in [(x["name"], x["a"], x["b"]) for x in shown(within, pair)]
    one = shown("{name}: {b} measured {effect} against {a}, but with one value a side the noise is unknown, so this "
                "decides nothing: repeat each at least twice.", pair)
    assert [(x["name"], x["b"], x["effect"], x["a"]) for x in one][:1] == [
        ("Output throughput", "B: there", "1.00× (0 %)", "A: here")], one
