"""Serving Lab engine: plain Python (no Streamlit) that owns the vLLM server, the measurements and the run
history under one facade (lab.Lab), which the pages, the CLI and the tests call. See docs/architecture.md."""
