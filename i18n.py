"""The app's two languages, English and Korean, per viewer: `_()`, `tr()` and the viewer's choice.
See docs/internals.md#messages-and-i18n."""
from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

import streamlit as st
from babel.dates import format_datetime
from babel.numbers import format_decimal

import app_settings
from engine import messages, settings
from engine.messages import Message, catalog, catalog_problem, filled, translate

LANGS = {"en": "English", "ko": "한국어"}


def default_lang() -> str:
    """A room's fixed language (SERVING_LAB_LANG), else the browser's, else English."""
    try:
        fixed = app_settings.get().lang
    except settings.ConfigError:
        fixed = ""  # another variable is wrong: the app says which (app.py), in the browser's language
    if fixed in LANGS:
        return fixed
    browser = (getattr(st.context, "locale", None) or "").lower()[:2]
    return browser if browser in LANGS else "en"


def lang() -> str:
    """This viewer's language: the switch's value (the sidebar draws it after the navigation's titles, so on
    a first run only the address has it yet), else the default."""
    chosen = st.session_state.get("lang") or st.query_params.get("lang")
    return chosen if chosen in LANGS else default_lang()


def _(message: str, /, **values) -> str:
    """`message` in this viewer's language, its {placeholders} filled with `values` (engine sentences among
    them said in this language too)."""
    return filled(catalog(lang()).gettext(message), _said(values), lang())


def _said(values: dict) -> dict:
    return {k: translate(v, lang()) if isinstance(v, (Message, BaseException)) else v for k, v in values.items()}


def N_(message: str) -> str:
    """Marks a string for extraction where it is defined (a table); `_()` translates it where shown."""
    return message


def ngettext(singular: str, plural: str, n: int, /, **values) -> str:
    return filled(catalog(lang()).ngettext(singular, plural, n), {"n": n, **_said(values)}, lang())


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


def seconds(x: float) -> str:
    """A time in seconds in this viewer's unit, in significant figures: 4.1 s, 0.040초 (engine.messages.seconds,
    which charts use too)."""
    return messages.seconds(x, lang())


def duration(x: float) -> str:
    """A short time: 850 ms, else 4.1 s / 4.1초."""
    return messages.duration(x, lang())


def when(t: float, fmt: str = "medium") -> str:
    """An epoch time as this viewer's locale writes a date and time (e.g. 2026. 12. 1. 오후 3:04:05): medium, as the
    figures write one (engine.messages.when), or Babel's `fmt`."""
    if fmt == "medium":
        return messages.when(t, lang())
    return format_datetime(datetime.fromtimestamp(t), format=fmt, locale=lang())


def switch() -> None:
    """The sidebar's language control; the choice is this viewer's only (running jobs, chat and
    selections live in the engine or in session state, so a switch loses nothing). The address carries a
    choice other than the default as ?lang=, set again on every run since a page switch drops it."""
    st.session_state.setdefault("lang", lang())
    st.segmented_control("Language / 언어", list(LANGS), format_func=LANGS.get, key="lang", required=True,
                         on_change=_relabel, label_visibility="collapsed")
    if problem := catalog_problem(lang()):  # chosen, yet shown in English: say why, in both languages' stead
        st.warning(str(problem), icon=":material/translate:")
    if (chosen := lang()) != default_lang():
        st.query_params["lang"] = chosen
    else:
        st.query_params.pop("lang", None)


def _relabel() -> None:
    """Streamlit keeps a choice widget's value in the browser as its option's label: after a switch of
    language the old label matches none of the new ones, and the radio shows no selection (the selectbox
    the old label). Setting each choice again makes Streamlit send it under its new label. The options
    that have labels are strings (keys, msgids); booleans, numbers, uploads and buttons are left alone
    (a button's value may not be set)."""
    for key, value in list(st.session_state.items()):
        if key != "lang" and (isinstance(value, str) or isinstance(value, (list, tuple)) and value
                              and all(isinstance(v, str) for v in value)):
            st.session_state[key] = value
