"""The Chat page's answer length follows the server's max-model-len and says why when that is below the
lab's 300 (after Tuning, Chat was capped at 256 tokens without a word). AppTest, no browser."""
from __future__ import annotations

from streamlit.testing.v1 import AppTest

from tests.conftest import app_page
from tests.said import read


def _chat(lab, monkeypatch, max_len: int | None) -> AppTest:
    monkeypatch.setattr(lab, "serving_max_len", lambda: max_len)  # a ready server with this max-model-len
    return app_page("app_pages/chat.py")


def _said(at: AppTest) -> str:
    return " ".join(c.value.replace("\\", "") for c in at.sidebar.caption)


def test_a_short_max_model_len_caps_the_answer_and_says_why(lab, monkeypatch):
    at = _chat(lab, monkeypatch, 256)
    slider = at.sidebar.slider[0]
    assert (slider.max, slider.value) == (256, 256)
    capped = read("At most {len} tokens, below the lab's 300: the server runs with --max-model-len {len} (a Tuning "
                  "comparison leaves its last configuration running), which holds the prompt and the answer together. "
                  "Restart it on the Server page for longer answers.", _said(at))
    assert capped == {"len": "256"}


def test_no_word_and_the_lab_s_300_when_the_server_holds_more(lab, monkeypatch):
    at = _chat(lab, monkeypatch, 2048)
    slider = at.sidebar.slider[0]
    assert (slider.max, slider.value) == (2048, 300) and "below the lab's 300" not in _said(at)
    at = _chat(lab, monkeypatch, 300)  # capped at exactly what the server holds, not below it
    assert (at.sidebar.slider[0].max, at.sidebar.slider[0].value) == (300, 300)
