"""When requests arriving at a rate are sent: seeded gaps, Poisson, gamma or constant, at one rate, ramped over
time, or ramped request by request as `vllm bench serve --ramp-up-strategy` does. See
docs/measuring.md#load-generator."""
from __future__ import annotations

import random


def rate_at(i: int, n: int, strategy: str, start: float, end: float) -> float:
    """The rate (requests/s) request i of n arrives at under a ramp by request, as vllm bench serve computes it:
    from `start` to `end` linearly, or exponentially (start × (end/start)^p), in p = i / (n - 1)."""
    p = i / max(n - 1, 1)
    if strategy == "linear":
        return start + (end - start) * p
    return start * (end / start) ** p


def offsets(n: int, rate: float, seed: int, burstiness: float = 1.0, ramp_up_s: float = 0.0,
            ramp_from: float | None = None, arrival: str = "poisson", ramp_strategy: str | None = None,
            ramp_start_rps: float | None = None) -> list[float]:
    """Send offsets (s) of `n` arrivals. Gaps are gamma-distributed as `vllm bench serve --burstiness` draws them
    (shape = burstiness, scale = 1 / (rate × burstiness): mean 1/rate; burstiness 1 is Poisson, below 1 burstier,
    above 1 steadier), or all 1/rate for `arrival` "constant" (vllm's burstiness inf). Each gap is drawn at the rate
    of its moment: `rate` throughout; under a ramp over time rising linearly from `ramp_from` (default a tenth of
    it) to `rate` over `ramp_up_s` seconds; under a ramp by request (`ramp_strategy` linear or exponential) request
    i's from `ramp_start_rps` to `rate` (rate_at). Without a ramp they are rescaled like vllm bench serve's, so the
    last request goes out at n/rate exactly (steadier throughput across seeds); a ramp's are not (that would bend
    it)."""
    rng = random.Random(seed)
    start = rate / 10 if ramp_from is None else ramp_from
    t, out = 0.0, []
    for i in range(n):
        if ramp_strategy:
            now = rate_at(i, n, ramp_strategy, float(ramp_start_rps or rate), rate)
        elif ramp_up_s > 0:
            now = start + (rate - start) * min(1.0, t / ramp_up_s)
        else:
            now = rate
        if arrival == "constant":
            t += 1 / now
        else:
            t += rng.expovariate(now) if burstiness == 1 else rng.gammavariate(burstiness, 1 / (now * burstiness))
        out.append(t)
    if ramp_up_s <= 0 and not ramp_strategy and out and out[-1] > 0:
        k = (n / rate) / out[-1]
        out = [x * k for x in out]
    return out
