"""Errors a user can cause. Each carries one sentence: what happened and what to do. Pages show it
with st.error, the CLI prints it; neither shows a traceback for these."""
from __future__ import annotations


class LabError(Exception):
    """Base of every user-facing error; str(e) is the sentence to show."""


class ConfigError(LabError):
    """A server setting is invalid; nothing was started."""


class PortInUse(LabError):
    """Something else listens on the port; it is reported, never killed."""


class ServerFailed(LabError):
    """The server exited or never became ready; the message holds the cause from its log."""


class ServerBusy(LabError):
    """An action needs the server stopped (or running) and it is not."""


class NotPresenter(LabError):
    """A viewer tried an action reserved for the presenter."""


class Throttled(NotPresenter):
    """Too many wrong presenter tokens: refused for a while, whatever the token."""


class LeftoversHold(LabError):
    """Processes of an earlier server of this app still run (and hold memory); they can be cleared."""
