"""Serving Lab engine: plain Python (no Streamlit) that owns the vLLM server, the measurements and
the run history, grouped by concept (serving/, measure/, observe/, results/, figures/) under one facade
(lab.Lab). The pages, the CLI (`python -m engine`) and the tests all call into it. See
docs/architecture.md."""
