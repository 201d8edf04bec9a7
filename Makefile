# Two commands for a fresh machine (see README.md). Both are idempotent.
PORT ?= 8501
HOST ?= 127.0.0.1

.PHONY: run test setup bench
run:
	scripts/setup.sh run
	.venv/bin/python -m streamlit run app.py --server.address $(HOST) --server.port $(PORT)

test:
	scripts/setup.sh test
	.venv/bin/python -m pytest $(PYTEST_ARGS)

setup:
	scripts/setup.sh test
