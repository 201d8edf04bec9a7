"""The app's two languages (issue #11), per viewer: English and Korean.

Strings shown in the UI are wrapped in `_()` (or `ngettext`) where they are shown; the engine's
sentences (errors, stages, causes, notices, chart text) are Messages made with engine.messages.say,
English where made (the CLI speaks English) and said again here with `tr()`; figures take the
viewer's language (`lang()`). `pybabel extract` collects both into locales/messages.pot, translators
review locales/ko/LC_MESSAGES/messages.po as text, and scripts/setup.sh compiles it. Each viewer's
language lives in their session: the sidebar's switch, else SERVING_LAB_LANG (a room's fixed choice),
else the browser's language (st.context.locale). Numbers and dates are formatted with Babel."""
from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

import streamlit as st
from babel.dates import format_datetime
from babel.numbers import format_decimal

from engine.messages import Message, catalog, translate

LANGS = {"en": "English", "ko": "한국어"}


def default_lang() -> str:
    """A room's fixed language (SERVING_LAB_LANG), else the browser's, else English."""
    fixed = os.environ.get("SERVING_LAB_LANG", "").strip().lower()[:2]
    if fixed in LANGS:
        return fixed
    browser = (getattr(st.context, "locale", None) or "").lower()[:2]
    return browser if browser in LANGS else "en"


def lang() -> str:
    """This viewer's language: set once per browser session, changed by the sidebar's switch."""
    if st.session_state.get("lang") not in LANGS:
        st.session_state["lang"] = default_lang()
    return st.session_state["lang"]


def _(message: str, /, **values) -> str:
    """`message` in this viewer's language, its {placeholders} filled with `values` (engine sentences among
    them said in this language too)."""
    text = catalog(lang()).gettext(message)
    return text.format(**_said(values)) if values else text


def _said(values: dict) -> dict:
    return {k: translate(v, lang()) if isinstance(v, (Message, BaseException)) else v for k, v in values.items()}


def N_(message: str) -> str:
    """Marks a string for extraction where it is defined (a table); `_()` translates it where shown."""
    return message


def ngettext(singular: str, plural: str, n: int, /, **values) -> str:
    text = catalog(lang()).ngettext(singular, plural, n)
    return text.format(n=n, **_said(values))


def tr(text: object) -> str:
    """An engine sentence (a Message, an exception, a stage or cause) in this viewer's language; data as is."""
    return translate(text, lang())


def shown(options: Iterable, say: Callable[[Any], str] | None = None) -> Callable[[Any], str]:
    """A widget's format_func: its options in this viewer's language, said while the page is drawn (a
    format_func called later, as AppTest does, would not know the viewer)."""
    said = {o: (say or _)(o) for o in options}
    return lambda o: said.get(o, str(o))


def said(e: BaseException) -> object:
    """What an error says, kept to be shown later (its Message, said again in the reader's language)."""
    return e.args[0] if len(e.args) == 1 and isinstance(e.args[0], Message) else str(e)


def number(x: float, digits: int = 0) -> str:
    """`x` with the viewer's digit grouping, e.g. 12,345.6."""
    return format_decimal(round(x, digits), format=f"#,##0{'.' + '0' * digits if digits else ''}", locale=lang())


def when(t: float, fmt: str = "medium") -> str:
    """An epoch time as this viewer's locale writes a date and time (e.g. 2026. 12. 1. 오후 3:04:05)."""
    return format_datetime(datetime.fromtimestamp(t), format=fmt, locale=lang())


def switch() -> None:
    """The sidebar's language control; the choice is this viewer's only (running jobs, chat and
    selections live in the engine or in session state, so a switch loses nothing)."""
    lang()
    st.segmented_control("Language / 언어", list(LANGS), format_func=LANGS.get, key="lang",
                         selection_mode="single", label_visibility="collapsed")
