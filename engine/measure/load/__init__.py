"""Generating load: what to send (LoadSpec), one streamed request, the event loop and client processes, and one
chat answer streamed."""
