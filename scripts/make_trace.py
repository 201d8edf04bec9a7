"""Write examples/workloads/tiny-trace.jsonl: a small synthetic trace in the Mooncake shape (one JSON object per
line: timestamp in ms, input_length, output_length, hash_ids of 512-token blocks), so trace replay runs offline
on a fresh clone. Seeded: running it again writes the same file.

40 requests over about 20 s (Poisson, 2 requests/s). A third of them open with the same first block (hash id 0:
a long shared system prompt, as an assistant's requests do), so the prefix cache has something to reuse; the
rest have blocks of their own. Lengths fit a 2048-token context: inputs 32-900 tokens, outputs 8-64.

    python scripts/make_trace.py            # rewrites the file
    python scripts/make_trace.py --check    # exits 1 when the file differs from what the script makes"""
from __future__ import annotations

import json
import math
import random
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "examples" / "workloads" / "tiny-trace.jsonl"
BLOCK = 512


def rows(n: int = 40, rate: float = 2.0, seed: int = 20) -> list[dict]:
    rng = random.Random(seed)
    t, out, next_block = 0.0, [], 1
    for i in range(n):
        shared = i % 3 == 0
        length = rng.randint(520, 900) if shared else min(400, max(32, round(rng.lognormvariate(math.log(120), 0.8))))
        blocks = math.ceil(length / BLOCK)
        ids = ([0] if shared else []) + list(range(next_block, next_block + blocks - shared))
        next_block += blocks - shared
        out.append({"timestamp": round(t * 1000), "input_length": length,
                    "output_length": rng.randint(8, 64), "hash_ids": ids})
        t += rng.expovariate(rate)
    return out


def text() -> str:
    return "".join(json.dumps(r) + "\n" for r in rows())


if __name__ == "__main__":
    if "--check" in sys.argv[1:]:
        sys.exit(0 if OUT.read_text() == text() else 1)
    OUT.write_text(text())
    print(f"wrote {OUT} ({len(rows())} requests)")
