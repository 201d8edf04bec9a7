"""The app process's one Settings (engine.settings): the environment read once, when the app's first page is drawn,
and shared by every page and viewer: ui.get_lab builds the Lab with it, i18n reads a room's fixed language from it.
A test hands the app its own by replacing `get` (tests/conftest.py's `app_uses`)."""
from __future__ import annotations

import streamlit as st

from engine.settings import Settings, from_env


@st.cache_resource(show_spinner=False)
def get() -> Settings:
    """A bad variable: its ConfigError sentence (app.py shows it), read again on the next page drawn."""
    return from_env()
