"""Keeping results: the typed records of a run and the history they are saved in.
See docs/internals.md#store."""
