# Two commands for a fresh machine (see README.md). Both are idempotent.
PORT ?= 8501
HOST ?= 127.0.0.1
BASE ?=

.PHONY: run test test-quick setup bench catalogue
run:
	scripts/setup.sh run
	.venv/bin/python -m streamlit run app.py --server.address $(HOST) --server.port $(PORT) \
		$(if $(BASE),--server.baseUrlPath $(BASE))

# Two workers, each test file on one of them (its module fixtures, servers and browsers stay together): most of
# a real test's time is vLLM starting, a page drawing or a run waiting on its answers, which the other worker
# fills. WORKERS=0 runs them in this one process.
WORKERS ?= 2
test:
	scripts/setup.sh test
	.venv/bin/python -m pytest -n $(WORKERS) --dist loadfile $(PYTEST_ARGS)

# The inner loop: unit tests, AppTest pages and fakes; no vLLM server, no browser (tests/conftest.py).
test-quick:
	scripts/setup.sh run
	SERVING_LAB_QUICK=1 .venv/bin/python -m pytest -q -n $(WORKERS) --dist loadfile -m "not server and not e2e and not slow" $(PYTEST_ARGS)

setup:
	scripts/setup.sh test

# After changing a string the UI shows (_() in the UI, say() in engine/): the catalogue follows the code.
catalogue:
	.venv/bin/pybabel extract -F babel.cfg -k _ -k N_ -k ngettext:1,2 -k say -k say_n:1,2 -k mark \
		--no-location --omit-header -o locales/messages.pot .
	.venv/bin/pybabel update -i locales/messages.pot -d locales -D messages --no-fuzzy-matching --ignore-obsolete
