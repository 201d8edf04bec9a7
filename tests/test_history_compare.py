"""History's "Compare" and exports: a per-run CSV beside the per-request one (the app and the
CLI), the runs side by side in a table from the same rows, and the HTML report's cold marker."""
from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from engine.digits import significant
from engine import figures
from engine.figures.report import build_report
from engine.measure.judge import stats
from engine.results import exchange
from engine.results.records import Notes, Repeat, RequestRecord, RunResult, ServerNotes, Warmth
from engine.results.store import RunStore
from tests.said import said, values

ROOT = Path(__file__).resolve().parent.parent
COMMAND = ("VLLM_CPU_KVCACHE_SPACE=2 python -m vllm.entrypoints.openai.api_server --model /m/SmolLM2 "
           "--served-model-name SmolLM2 --max-model-len 512 --enforce-eager --host 127.0.0.1 --port 9000")


def _run(label: str, n: int, cold: bool | None, why: str = "", repeat: Repeat | None = None,
         endpoint: str = "") -> RunResult:
    recs = [RequestRecord(index=i, prompt=f"p{i}", send_time=0.0, first_token_time=0.2 + i / 10,
                          chunk_times=[0.2 + i / 10, 0.3 + i / 10], end_time=1.0 + i / 10, prompt_tokens=20,
                          output_tokens=50) for i in range(n)]
    return RunResult(kind="vllm", scenario="tuning", label=label, records=recs, duration=2.0, started_at=time.time(),
                     model="/m/SmolLM2", summary=stats.summarize(recs, 2.0), load={"concurrency": n},
                     command=COMMAND, hardware={"summary": "2 CPU cores"},
                     extra=Notes(warmth=Warmth(cold=cold, why=why), repeat=repeat or Repeat(),
                                 server=ServerNotes(endpoint=endpoint)))


def test_the_per_run_csv_has_one_row_per_run_with_the_json_exports_numbers():
    runs = [_run("max-model-len 512", 10, cold=True), _run("max-model-len 2048", 4, cold=False)]
    rows = list(csv.DictReader(io.StringIO(exchange.export_runs_csv(runs))))
    assert [r["run_id"] for r in rows] == [r.id for r in runs]  # one row a run (the other export: one a request)
    bench = json.loads(exchange.export_json(runs))
    for row, obj in zip(rows, bench):
        for key in ("completed", "duration", "output_throughput", "mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms"):
            assert float(row[key]) == obj[key], key  # vllm bench serve's keys, the same numbers
    assert [r["warmth"] for r in rows] == ["cold", "warm"]
    assert rows[0]["server"] == "this app's server" and rows[0]["hardware"] == "2 CPU cores"


def test_the_cli_exports_the_same_per_run_csv(tmp_path):
    db = tmp_path / "history.sqlite"
    store = RunStore(db)
    runs = [_run("a", 3, cold=None), _run("b", 5, cold=True)]
    for r in runs:
        store.save(r)
    out = tmp_path / "runs.csv"
    p = subprocess.run([sys.executable, "-m", "engine", "export", "--format", "csv-runs", "--out", str(out)],
                       cwd=ROOT, env={**os.environ, "SERVING_LAB_DB": str(db)}, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    assert out.read_text() == store.export_csv(None, per="run")
    assert len(list(csv.DictReader(io.StringIO(out.read_text())))) == 2


def test_the_compare_table_puts_runs_side_by_side_with_their_flags_and_warmth():
    runs = [_run("max-model-len 512", 10, cold=True), _run("max-model-len 2048", 4, cold=False,
                                                             endpoint="http://gpu-box:8000")]
    columns, table = figures.compare_table(runs)
    assert columns == ["Compared", "1. max-model-len 512", "2. max-model-len 2048"]
    rows = {r["Compared"]: [r[c] for c in columns[1:]] for r in table}
    assert rows["Requests completed"] == ["10", "4"]
    assert rows["Output tokens / s"] == [significant(r.summary.output_throughput) for r in runs]
    assert rows["Cold / warm"] == ["❄ cold", "warm"]
    assert rows["Flags"] == ["VLLM_CPU_KVCACHE_SPACE=2 --max-model-len 512 --enforce-eager"] * 2
    assert rows["Where it ran"] == ["this app's server", "http://gpu-box:8000"]
    assert rows["Hardware"] == ["2 CPU cores"] * 2
    _c, ko = figures.compare_table(runs, lang="ko")
    assert "첫 실행(콜드) / 예열 후" in [r[_c[0]] for r in ko]


def test_the_html_report_marks_a_cold_run():
    cold, warm = _run("first batch", 5, cold=True, why="first"), _run("second batch", 5, cold=False)
    page = build_report([cold, warm])
    assert "❄ cold" in page and "warm" in page


def test_the_compare_chart_names_the_first_run_only_beyond_noise():
    """It said "X is best at …" over any difference, and then "Highest: X" beside a verdict that decided nothing.
    Now the caption's first sentence follows the verdict: a whole run's number from one run each names no run (its
    noise unknown), a typical request's number judged within noise calls the two level; runs of one label told
    apart by their start, as the page's table writes a time."""
    from engine.messages import when

    a, b = _run("concurrent-10", 8, cold=False), _run("concurrent-10", 8, cold=False)
    b.started_at = a.started_at + 300
    b.summary = stats.summarize(b.records, 1.9)  # 5 % more throughput: one run each, its noise unknown
    top, lead = figures.caption_said(figures.history_compare([a, b], "output_throughput"))
    first, second = ({"name": "concurrent-10", "time": when(t, "en", "time")} for t in (a.started_at, b.started_at))
    assert said(top).template == "No run is named best: the two best cannot be told apart yet."
    assert said(lead).template.startswith("{name}: {b} measured {effect} against {a}, but with one value a side")
    assert {k: values(lead)[k] for k in ("name", "a", "b", "effect")} == {
        "name": "Output throughput", "a": first, "b": second, "effect": {"ratio": "1.05", "change": "+5"}}
    level, same = figures.caption_said(figures.history_compare([a, b], "mean_ttft_ms"))  # the same requests
    assert said(level).template == "No run is best beyond noise: the two best are level on this machine."
    assert said(same).template.startswith("{name}: no measurable difference on this machine between")
    assert values(same)["how"]["counts"] == {"n": 8}  # judged from the requests


def test_the_highest_is_named_only_where_the_verdict_beside_it_is_beyond_noise():
    """Seen on History last session: "Highest: …" named one of two load tests' repeats 1 % apart while the verdict
    beside it said no difference beyond noise. Sets within noise are said to be level; a set beyond noise is named
    with the centre the verdict and the dashed line take."""
    from engine.measure.judge import verdict

    near = _set("A", 3, "near-a", time.time() - 120, [4, 6, 5]) + _set("B", 3, "near-b", time.time() - 60, [4, 6, 5])
    for r, t in zip(near[3:], (1.01, 1.01, 1.01)):  # 1 % apart, with the repeats' own spread of ±20 %
        r.summary = stats.summarize(r.records, r.duration / t)
    top, lead, *_ = figures.caption_said(figures.history_compare(near, "output_throughput"))
    assert said(lead).template.startswith("{name}: no measurable difference on this machine between")
    assert said(top).template == "No run is best beyond noise: the two best are level on this machine."
    assert "Highest" not in figures.caption(figures.history_compare(near, "output_throughput"))
    far = _set("A", 3, "far-a", time.time() - 120, [5, 5, 5]) + _set("B", 3, "far-b", time.time() - 60, [5, 5, 5])
    for i, r in enumerate(far):
        r.summary = stats.summarize(r.records, r.duration / ((2.0 if i >= 3 else 1.0) + 0.01 * (i % 3)))
    top, lead, *_ = figures.caption_said(figures.history_compare(far, "output_throughput"))
    assert said(lead).template.startswith("{name}: {b} is higher than {a}")
    assert said(top).template == "Highest: {run}, {value} {unit} (higher is better)."
    centre = verdict.centre([r.summary.output_throughput for r in far[3:]])
    assert values(top)["run"] == "B" and values(top)["value"] == significant(centre)


def test_repeats_of_one_label_in_one_minute_are_bars_of_their_own():
    """Seen on a real server: three repeats of one label started within a minute shared one category, so their
    bars were drawn over each other and the label on top was another repeat's value."""
    runs = [_run("concurrent-10", 4, cold=False, repeat=Repeat(group="g", index=i + 1, total=3)) for i in range(3)]
    for i, r in enumerate(runs):
        r.started_at = runs[0].started_at + i
    fig = figures.history_compare(runs, "output_throughput")
    ticks = fig.layout.xaxis.ticktext
    assert len(set(fig.data[0].x)) == 3 and [x.endswith(f"{i}/3</span>") for i, x in enumerate(ticks, 1)] == [True] * 3


def test_one_bar_per_run_each_with_its_number_whatever_the_labels():
    """Once, five runs, two of them with one label, one minute and ids alike, drew four bars (two stacked
    in one category), the top one clipped and unnumbered. Each run is a bar of its own on the axis, told apart under
    it, its number never shrunk to fit the bar, and room above the tallest one for its number."""
    runs = [_run("concurrent-10", 4 + i, cold=False) for i in range(3)] + [_run("x" * 60, 10, cold=None),
                                                                           _run("같은 이름", 6, cold=True)]
    for i, r in enumerate(runs):
        r.started_at = runs[0].started_at
        r.id = "abcd" + str(i) * 8  # ids alike in their first characters, as two imports of one file
    bar = figures.history_compare(runs, "output_throughput").data[0]
    fig = figures.history_compare(runs, "output_throughput")
    assert len(bar.y) == 5 and len(set(bar.x)) == 5  # one position per run, whatever its label says
    ticks = dict(zip(fig.layout.xaxis.tickvals, fig.layout.xaxis.ticktext))
    assert len(set(ticks.values())) == 5 and all(ticks[x] for x in bar.x)
    numbers = {a.x: a for a in fig.layout.annotations if a.yref in (None, "y")}  # each at its full size
    assert all(numbers[x].text == f"<b>{significant(v)}</b>" and numbers[x].y == v for x, v in zip(bar.x, bar.y))
    assert bar.cliponaxis is False
    assert fig.layout.yaxis.range[1] >= max(bar.y) * 1.15
    longest = max(len(line) for t in ticks.values() for line in t.split("<br>") if "<span" not in line)
    assert longest <= 18, longest  # a label without spaces breaks too, not across its neighbours


def _set(label: str, n: int, group: str, at: float, widths: list[int]) -> list[RunResult]:
    """A load test's `n` repeats, started a second apart from `at`, each with `widths[i]` requests."""
    runs = [_run(label, widths[i], cold=False, repeat=Repeat(group=group, index=i + 1, total=n)) for i in range(n)]
    for i, r in enumerate(runs):
        r.started_at = at + i
    return runs


def test_two_runs_of_one_label_in_one_minute_are_told_apart_as_the_caption_names_them():
    """Seen on a real server (History, two runs of one label from 05:52): the bars said "Dec 07 05:52" and one of
    them a run id, while the caption's verdict named them "from 05:52:44" and "from 05:52:49" and its "Highest" named
    neither. The bars and the caption now tell them apart by the same start, to the second, as the page's table
    writes a time."""
    from datetime import datetime

    a, b = _run("concurrent-10", 4, cold=False), _run("concurrent-10", 6, cold=False)
    a.started_at = datetime(2026, 12, 7, 5, 52, 44).timestamp()
    b.started_at = a.started_at + 5
    fig = figures.history_compare([a, b], "output_throughput")
    top, lead = figures.caption_said(fig)
    ticks = fig.layout.xaxis.ticktext
    assert "5:52:44\u202fAM" in ticks[0] and "5:52:49\u202fAM" in ticks[1]
    assert values(lead)["a"]["time"] in " ".join(ticks) and values(lead)["b"]["time"] in " ".join(ticks)
    assert said(top).template == "No run is named best: the two best cannot be told apart yet."  # one run each
    # one label for every bar: said once under the axis, the bars carry only what tells them apart
    assert fig.layout.xaxis.title.text == "concurrent-10" and not any("concurrent-10" in t for t in ticks)


def test_a_load_tests_repeats_share_a_colour_and_a_line_at_the_centre_the_verdict_compares():
    """Seen on a real server (History, 3 repeats against 2 of one label): five blue bars, nothing saying which
    belonged together, while the caption compared the two sets' geometric means, drawn nowhere."""
    from engine.measure.judge import verdict

    three = _set("concurrent-10", 3, "g3", time.time() - 60, [4, 6, 5])
    two = _set("concurrent-10", 2, "g2", time.time() - 30, [7, 8])
    fig = figures.history_compare(two + three, "output_throughput")
    colors = list(fig.data[0].marker.color)
    assert len(set(colors[:2])) == 1 and len(set(colors[2:])) == 1 and colors[0] != colors[2]
    lines = sorted(fig.layout.shapes, key=lambda s: s.x0)
    expected = [verdict.centre([r.summary.output_throughput for r in g]) for g in (two, three)]
    assert [s.y0 for s in lines] == [s.y1 for s in lines] == expected
    assert (lines[0].x0, lines[0].x1, lines[1].x0, lines[1].x1) == (-0.45, 1.45, 1.55, 4.45)
    note = figures.caption_said(fig)[-1]
    assert said(note).template.startswith("Bars of one colour are the repeats of one load test")
    assert all(significant(c) in values(note)["each"] for c in expected)


def test_a_repeats_dashed_line_passes_behind_every_bars_number():
    """Seen on History's screenshots: the dashed line at a set's geometric mean ran through the number of a bar just
    below it ('108', '117'), the bar's own text having no background. Each number is drawn on the page's white
    above its bar, over the line (drawn beneath the bars), so the line is hidden where it meets a number."""
    runs = _set("concurrent-10", 3, "g", time.time() - 60, [5, 5, 6])  # 125, 125, 150: their centre 133
    fig = figures.history_compare(runs, "output_throughput")
    (line,) = fig.layout.shapes
    bar = fig.data[0]
    assert line.layer == "below" and any(v < line.y0 < v * 1.1 for v in bar.y)  # a number sits on the line
    numbers = {a.x: a for a in fig.layout.annotations if a.yref in (None, "y")}
    for x, v in zip(bar.x, bar.y):
        number = numbers[x]
        assert number.text == f"<b>{significant(v)}</b>" and number.y == v and number.yanchor == "bottom"
        assert number.bgcolor == fig.layout.template.layout.plot_bgcolor == "white"  # opaque: the line hidden
    assert not bar.text  # no second copy without a background


def test_every_time_on_history_is_written_one_way_in_the_viewers_language():
    """Seen on History last session: the table said "2026. 12. 7. 오전 5:52:44", the bars "Dec 07 05:52" and the caption
    and the compared runs' table "05:52:44" and "2026-12-07 05:52:44". Every time there now comes from one Babel
    format in the viewer's language (engine.messages.when; the table's column, ui.started, is its medium date and
    time), each part where only a part is shown."""
    from datetime import datetime

    from engine.messages import when

    a, b = _run("동시 요청", 4, cold=False), _run("동시 요청", 6, cold=False)
    a.started_at = datetime(2026, 12, 6, 17, 52, 44).timestamp()
    b.started_at = datetime(2026, 12, 7, 5, 52, 49).timestamp()  # another day: the bars say the date too
    fig = figures.history_compare([a, b], "output_throughput", lang="ko")
    ticks = fig.layout.xaxis.ticktext
    for r, tick in zip((a, b), ticks):
        assert when(r.started_at, "ko", "date") in tick and when(r.started_at, "ko", "time") in tick, tick
    assert "오후 5:52:44" in ticks[0] and "2026. 12. 6." in ticks[0]
    top, lead = figures.caption_said(fig)
    assert {values(lead)["a"]["time"], values(lead)["b"]["time"]} == {when(r.started_at, "ko", "time") for r in (a, b)}
    assert all(t in figures.caption(fig) for t in ("오후 5:52:44", "오전 5:52:49"))
    columns, rows = figures.compare_table([a, b], lang="ko")
    started = next(row for row in rows if row[columns[0]] == "시작 시각")
    assert [started[c] for c in columns[1:]] == [when(r.started_at, "ko") for r in (a, b)]


def test_bar_labels_fit_the_room_each_bar_has():
    """Seen in Korean at 1920x1080 (History, 5 and 8 bars in half the page): "vLLM, 동시 요청vLLM, 동시 요청…", each
    label wider than its bar's share of the axis and written over its neighbours'."""
    from engine.figures.compare import _TICK_ROOM
    from engine.figures.theme import _shown_width

    for n in (2, 5, 8):
        runs = [_run(f"vLLM, 동시 요청 {i}개 (16 토큰)", 4, cold=False) for i in range(n)]
        ticks = figures.history_compare(runs, "output_throughput", lang="ko").layout.xaxis.ticktext
        widest = max(_shown_width(line) for t in ticks for line in t.split("<br>") if "<span" not in line)
        assert widest * n <= _TICK_ROOM, (n, widest)


def test_the_times_under_the_bars_fit_the_room_each_bar_has():
    """Seen in Korean at 1920x1080 (History, a load test's 8 repeats): "오전 9:37:41" under each bar, in the smaller
    type, wider than the bar's share of the axis and written over its neighbours'."""
    import re
    from datetime import datetime

    from engine.figures.compare import _TICK_ROOM
    from engine.figures.theme import BASE_SIZE, _shown_width

    for lang in ("ko", "en"):
        for n in (2, 5, 8):
            runs = [_run("vLLM", 4, cold=False) for _ in range(n)]
            for i, r in enumerate(runs):
                r.started_at = datetime(2026, 12, 6 + i % 2, 9, 37, 41 + i).timestamp()  # two days: the date too
            ticks = figures.history_compare(runs, "output_throughput", lang=lang).layout.xaxis.ticktext
            small = [re.sub(r"<[^>]+>", "", line) for t in ticks for line in t.split("<br>")]
            widest = max(_shown_width(line) for line in small)
            assert widest * n * (BASE_SIZE - 4) / BASE_SIZE <= _TICK_ROOM, (lang, n, small)


def test_tuning_writes_its_times_as_history_does_in_the_viewers_language():
    """The Tuning chart told two runs of one configuration apart by "Dec 07 05:52" (English) or "12월 7일 05:52"
    (Korean) under the bars and in its caption, while History and the tables write "오전 5:52:44": one Babel format
    (engine.messages.when), the time to the second, the date too only when the runs span several days."""
    from datetime import datetime

    from engine.messages import when

    for lang in ("ko", "en"):
        a, b = _run("max-model-len 512", 4, cold=False), _run("max-model-len 512", 6, cold=False)
        a.started_at = datetime(2026, 12, 7, 5, 52, 44).timestamp()
        b.started_at = datetime(2026, 12, 7, 17, 53, 49).timestamp()
        fig = figures.tuning_compare([a, b], lang=lang)
        ticks, cap = fig.data[0].x, figures.caption(fig)
        for r, tick in zip((a, b), ticks):
            assert when(r.started_at, lang, "time") in tick, tick
            assert when(r.started_at, lang, "date") not in tick, tick  # one day: no date
            assert when(r.started_at, lang, "time") in cap, cap
        assert not any(old in t for t in (*ticks, cap) for old in ("05:52", "17:53", "Dec 07")), (ticks, cap)
        b.started_at = datetime(2026, 12, 8, 5, 52, 49).timestamp()  # another day: the date as well
        ticks = figures.tuning_compare([a, b], lang=lang).data[0].x
        assert all(when(r.started_at, lang, "date") in t for r, t in zip((a, b), ticks)), ticks


def test_a_time_too_wide_for_its_bar_breaks_at_its_no_break_space_and_drops_it():
    """Seen in English under History's eight repeats at 1920x1080: "12:04:54 -" over "PM", the time cut after its
    seconds with Babel's no-break space (U+202F) left at a line's edge, drawn as a stray mark. Where the time cannot
    fit, it breaks there, without the space; where it fits, it stays whole."""
    import re
    from datetime import datetime

    from engine.figures.theme import wrap
    from engine.messages import when

    assert wrap("12:04:54\u202fPM", 8) == "12:04:54<br>PM"
    assert wrap("12:04:54\u202fPM", 12) == "12:04:54\u202fPM"
    runs = [_run("vLLM", 4, cold=False) for _ in range(8)]
    for i, r in enumerate(runs):
        r.started_at = datetime(2026, 12, 7, 12, 4, 50 + i).timestamp()
        r.extra.repeat.group, r.extra.repeat.index, r.extra.repeat.total = "g", i + 1, 8
    ticks = figures.history_compare(runs, "output_throughput", lang="en").layout.xaxis.ticktext
    lines = [re.sub(r"<[^>]+>", "", line) for t in ticks for line in t.split("<br>")]
    assert not [line for line in lines if line != line.strip("\u202f ")], lines
    for r in runs:  # each time still said whole, over two lines at most
        assert any(when(r.started_at, "en", "time").replace("\u202f", "<br>") in t or
                   when(r.started_at, "en", "time") in t for t in ticks), ticks
