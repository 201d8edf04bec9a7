"""The quick tier's Korean check, no browser and no server: every page that renders with
the server stopped, driven through app.py with Streamlit's AppTest in Korean (?lang=ko, as a link would
carry it), on a history holding the shipped example runs, shows no English word but names (tests/korean.py's
rule) in any text it draws: titles, sentences, captions, boxes, labels, options, placeholders, tooltips,
metrics, expanders and its charts' own text. tests/test_e2e_korean.py checks the same in a real browser,
with a real server."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from .korean import data_words, english, english_in, unquoted

ROOT = Path(__file__).resolve().parent.parent
APP = str(ROOT / "app.py")
PAGES = ["app_pages/server.py", "app_pages/monitor.py", "app_pages/naive_vs_vllm.py", "app_pages/load.py",
         "app_pages/tuning.py", "app_pages/chat.py", "app_pages/room.py", "app_pages/history.py"]


@pytest.fixture(scope="module", autouse=True)
def lab(lab):
    """The app's Lab (conftest) on a history holding the example runs, its vLLM port a free one."""
    assert lab.store.import_examples(), "the shipped example runs did not import"
    return lab


# Proto fields that hold text a viewer reads (code, log lines and data frames are not among them).
FIELDS = ("body", "label", "placeholder", "help", "value", "caption", "title")
SKIP = {"code", "exception", "json", "arrow_data_frame", "dataframe", "html"}


def _texts(node, charts: list[str], quoted: list[str]) -> list[str]:
    """Every string in the element tree under `node`; a chart's own text into `charts` and `quoted`."""
    out: list[str] = []
    proto = getattr(node, "proto", None)
    kind = getattr(node, "type", "")
    if kind == "plotly_chart":
        _chart(json.loads(proto.spec), charts, quoted)
    elif proto is not None and kind not in SKIP:
        hidden = getattr(getattr(proto, "label_visibility", None), "value", 0) != 0  # hidden or collapsed
        for field in FIELDS:
            if field == "label" and hidden:
                continue
            v = getattr(proto, field, None)
            if isinstance(v, str) and v:
                out.append(v)
        out += [o for o in getattr(proto, "options", []) if isinstance(o, str)]
        if kind == "expandable" or hasattr(proto, "expandable"):
            out.append(getattr(getattr(proto, "expandable", None), "label", "") or "")
    for child in getattr(node, "children", {}).values():
        out += _texts(child, charts, quoted)
    return out


def _chart(spec: dict, charts: list[str], quoted: list[str]) -> None:
    def add(to, v):
        if isinstance(v, str):
            to.append(v)
        elif isinstance(v, dict):
            add(to, v.get("text"))
        elif isinstance(v, list):
            for x in v:
                add(to, x)

    layout = spec.get("layout", {})
    add(charts, layout.get("title"))
    for k, axis in layout.items():
        if k.startswith(("xaxis", "yaxis")) and isinstance(axis, dict):
            add(charts, axis.get("title"))
            add(quoted, axis.get("ticktext"))
    add(charts, [a.get("text") for a in layout.get("annotations", [])])
    for t in spec.get("data", []):
        add(charts, [t.get("name"), t.get("hovertemplate"), t.get("texttemplate")])
        add(quoted, [t.get("hovertext"), t.get("text"), t.get("x"), t.get("y")])


def _markup(text: str) -> str:
    """Streamlit's markdown syntax is not words: icons (:material/x:), badges (:green-badge[…]), escapes."""
    import re

    text = re.sub(r"<style>.*?</style>", " ", text, flags=re.S)  # a page's CSS (ui.line_breaking) is no words
    return re.sub(r":material/\w+:|:\w+-badge\[", " ", text).replace("\\", "")


@pytest.mark.parametrize("path", PAGES)
def test_a_korean_page_without_a_server_shows_no_english_but_names(path):
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params["lang"] = "ko"
    at.run()
    if path != "app_pages/server.py":
        at.switch_page(path).run()
    assert not at.exception, [e.value for e in at.exception]
    charts: list[str] = []
    quoted: list[str] = []
    texts = [unquoted(_markup(t)) for t in _texts(at._tree, charts, quoted)]
    left = {"text": english_in(texts), "charts": english_in(charts), "chart labels": english_in(quoted, data_words())}
    left = {where: words for where, words in left.items() if words}
    assert not left, f"English left on {path} in Korean: {left}"
def test_the_allow_list_lets_names_through_and_catches_english():
    """The rule itself: names and units pass, an English word in a Korean sentence does not."""
    assert not english(["vLLM 서버 · 포트 9104", "`--max-model-len` 2048", "SmolLM2-135M-Instruct", "TTFT 120 ms",
                        "%{y:.2f}초<extra></extra>", "http://127.0.0.1:8000/v1", "tok/s", "CUDA_VISIBLE_DEVICES",
                        "(max-num-seqs)", "vLLM의 /metrics", "VLLM::EngineCore", "서버 A와 B"])
    assert english(["평균 4.1 s"]) == ["s"]
    assert english(["Upload", "Choose options"]) == ["Upload", "Choose", "options"]
    assert not english(["What is the capital of Korea?"], frozenset({"what", "is", "the", "capital", "of", "korea"}))


