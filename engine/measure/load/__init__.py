"""Generating load: what to send (LoadSpec), one streamed request, the event loop and client processes, chat, and the
openai-SDK Python behind a run."""
