"""Keeping results: the typed records of a run and the history they are saved in. (docs/architecture.md)"""
