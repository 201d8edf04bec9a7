"""Serving Lab engine: plain Python (no Streamlit) that owns the vLLM server, the measurements and
the run history. The pages, the CLI (`python -m engine`) and the tests all call into this package."""
