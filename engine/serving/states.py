"""A server's states and how far its start has come, as the pages read them (no process, no socket here)."""
from __future__ import annotations

from engine.messages import mark
from engine.serving.vllm_log import STAGES

# Each compares equal to its English word, and a sentence that names one says it in the viewer's language.
# Stages and the events on the memory charts are such phrases too (mark()).
STOPPED, STARTING, READY = mark("stopped"), mark("starting"), mark("ready")
STOPPING, FAILED = mark("stopping"), mark("failed")


def startup_fraction(stage: str) -> float:
    """How far a starting server has come, by the startup stage its log shows (for a progress bar)."""
    names = [name for name, _ in STAGES]
    return (names.index(stage) + 1) / len(names) if stage in names else 0.05
