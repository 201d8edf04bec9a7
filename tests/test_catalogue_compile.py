"""`streamlit run app.py` without `make run`: the Korean catalogue has no compiled .mo yet, and
Korean must still be Korean; a catalogue that cannot be read is said, not silently English."""
from __future__ import annotations

import shutil

import pytest

from engine import messages
from engine.messages import catalog_problem, say, translate

from .conftest import ROOT


@pytest.fixture
def locales(tmp_path, monkeypatch):
    monkeypatch.setattr(messages, "LOCALES", tmp_path)
    messages.catalog.cache_clear()
    messages._PROBLEMS.clear()
    yield tmp_path / "ko" / "LC_MESSAGES"
    messages.catalog.cache_clear()
    messages._PROBLEMS.clear()


def test_korean_without_a_compiled_catalogue_is_compiled_from_its_po(locales):
    locales.mkdir(parents=True)
    shutil.copy(ROOT / "locales" / "ko" / "LC_MESSAGES" / "messages.po", locales / "messages.po")
    assert not (locales / "messages.mo").exists()
    assert translate(say("Guided lab"), "ko") == "실습 따라하기"
    assert catalog_problem("ko") is None


def test_a_catalogue_that_cannot_be_read_is_said(locales):
    locales.mkdir(parents=True)  # no .po, no .mo: a checkout that lost its locales
    assert translate(say("Guided lab"), "ko") == "Guided lab"
    problem = catalog_problem("ko")
    assert problem is not None and "make run" in problem and "messages.po" in problem
