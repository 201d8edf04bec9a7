# Two commands for a fresh machine (see README.md). Both are idempotent.
PORT ?= 8501
HOST ?= 127.0.0.1

.PHONY: run test setup bench catalogue
run:
	scripts/setup.sh run
	.venv/bin/python -m streamlit run app.py --server.address $(HOST) --server.port $(PORT)

test:
	scripts/setup.sh test
	.venv/bin/python -m pytest $(PYTEST_ARGS)

setup:
	scripts/setup.sh test

# After changing a string the UI shows (_() in the UI, say() in engine/): the catalogue follows the code.
catalogue:
	.venv/bin/pybabel extract -F babel.cfg -k _ -k N_ -k ngettext:1,2 -k say -k say_n:1,2 -k mark \
		--no-location --omit-header -o locales/messages.pot .
	.venv/bin/pybabel update -i locales/messages.pot -d locales -D messages --no-fuzzy-matching --ignore-obsolete
