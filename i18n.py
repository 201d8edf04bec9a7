"""The app's two languages (issue #11), per viewer: English and Korean.

Strings shown in the UI are wrapped in `_()` (or `ngettext`) where they are shown; `pybabel extract`
collects them into locales/messages.pot, translators review locales/ko/LC_MESSAGES/messages.po as
text, and scripts/setup.sh compiles it (`pybabel compile`). Each viewer's language lives in their
session: the sidebar's switch, else SERVING_LAB_LANG (a room's fixed choice), else the browser's
language (st.context.locale). engine/ stays English and free of Streamlit: the CLI speaks English.
Numbers are formatted with Babel for the viewer's locale."""
from __future__ import annotations

import functools
import gettext
import os
from pathlib import Path

import streamlit as st
from babel.numbers import format_decimal

LOCALES = Path(__file__).resolve().parent / "locales"
LANGS = {"en": "English", "ko": "한국어"}
DOMAIN = "messages"


@functools.cache
def catalog(lang: str) -> gettext.NullTranslations:
    """The compiled catalogue of `lang` (English, or a catalogue not compiled yet: the text as written)."""
    return gettext.translation(DOMAIN, localedir=LOCALES, languages=[lang], fallback=True)


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
    """`message` in this viewer's language, its {placeholders} filled with `values`."""
    text = catalog(lang()).gettext(message)
    return text.format(**values) if values else text


def N_(message: str) -> str:
    """Marks a string for extraction where it is defined (a table); `_()` translates it where shown."""
    return message


def ngettext(singular: str, plural: str, n: int, /, **values) -> str:
    text = catalog(lang()).ngettext(singular, plural, n)
    return text.format(n=n, **values)


def number(x: float, digits: int = 0) -> str:
    """`x` with the viewer's digit grouping, e.g. 12,345.6."""
    return format_decimal(round(x, digits), format=f"#,##0{'.' + '0' * digits if digits else ''}", locale=lang())


def switch() -> None:
    """The sidebar's language control; the choice is this viewer's only (running jobs, chat and
    selections live in the engine or in session state, so a switch loses nothing)."""
    lang()
    st.segmented_control("Language / 언어", list(LANGS), format_func=LANGS.get, key="lang",
                         selection_mode="single", label_visibility="collapsed")
