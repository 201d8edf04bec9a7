#!/usr/bin/env bash
# What a newcomer feels: fresh clone -> app answering at its URL via the README's run command, and
# the second run of the same. Usage: bench/newcomer.sh [clone-dir]. Writes bench/results/newcomer.md.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-/tmp/serving-lab-newcomer}
port=8765
rm -rf "$dir"
git clone -q "$repo" "$dir"

time_run() {  # seconds from `make run` to the app's health endpoint answering
  local t0=$(date +%s.%N)
  (cd "$dir" && make run PORT=$port >"$dir/run.log" 2>&1 &)
  until curl -sf "http://127.0.0.1:$port/_stcore/health" >/dev/null 2>&1; do
    sleep 0.5
    if (( $(echo "$(date +%s.%N) - $t0 > 1800" | bc) )); then echo "timeout" >&2; exit 1; fi
  done
  local t1=$(date +%s.%N)
  pkill -f "streamlit run app.py --server.address 127.0.0.1 --server.port $port" || true
  sleep 2
  echo "$t1 - $t0" | bc
}

first=$(time_run)
second=$(time_run)
t0=$(date +%s.%N); (cd "$dir" && scripts/setup.sh test >/dev/null); setup_test=$(echo "$(date +%s.%N) - $t0" | bc)
cpu=$(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2 | xargs)
out="$repo/bench/results/newcomer.md"
mkdir -p "$(dirname "$out")"
cat > "$out" <<MD
# Newcomer timings

Machine: $cpu, $(nproc) cores, $(free -g | awk '/Mem/{print $2}') GiB RAM. pip's cache warm (packages were
downloaded before on this machine), converted model cache warm or cold as noted. $(date -u +%Y-%m-%d).

| step | seconds |
|---|---:|
| fresh clone -> \`make run\` -> app answering | $first |
| second \`make run\` -> app answering | $second |
| second \`scripts/setup.sh test\` (what \`make test\` does before pytest) | $setup_test |
MD
cat "$out"
rm -rf "$dir"
