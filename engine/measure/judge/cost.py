"""What a million output tokens cost at a price per GPU-hour, and the price as a person types it."""
from __future__ import annotations

import math

from engine.errors import ConfigError
from engine.messages import say

MAX_PRICE_PER_GPU_HOUR = 1_000_000  # beyond any machine's rate: a typo, whose cost would print 40 digits


def check_price(price: float | None) -> float | None:
    """A price per GPU-hour as typed (None: no price), or ConfigError with one sentence (the CLI's
    --price-per-gpu-hour and the pages' price field say the same)."""
    if price is not None and not (math.isfinite(price) and 0 <= price <= MAX_PRICE_PER_GPU_HOUR):
        raise ConfigError(say("A price per GPU-hour of {price:g} cannot be used: give a price from 0 to 1,000,000 "
                              "(any currency, for an hour of the whole machine).", price=price))
    return price


def cost_per_million_output_tokens(price_per_gpu_hour: float | None, duration_s: float | None,
                                   output_tokens: int | None) -> float | None:
    """What a million output tokens cost at this rate: price / 3600 x duration / output tokens x 1e6.

    Assumes the one rate pays for the whole machine the server ran on (several GPUs: give their sum)
    for the measured part's wall time only, and that nothing else ran on it meanwhile: a warm-up,
    idle time between runs and the server's start are not charged. None when there is no price (the
    field left blank), no time or no output tokens to spread it over."""
    if price_per_gpu_hour is None or not duration_s or not output_tokens or price_per_gpu_hour < 0:
        return None
    return price_per_gpu_hour / 3600 * duration_s / output_tokens * 1e6


def run_cost_per_million(run, price_per_gpu_hour: float | None) -> float | None:
    """cost_per_million_output_tokens of a run (its measured wall time and output tokens); None without a price."""
    return cost_per_million_output_tokens(price_per_gpu_hour, run.duration, run.summary.get("total_output_tokens"))


MAX_PRICE_PER_KWH = 1000  # beyond any tariff: a typo


def check_kwh_price(price: float | None) -> float | None:
    """A price per kWh as typed (None: none), or ConfigError with one sentence."""
    if price is not None and not (math.isfinite(price) and 0 <= price <= MAX_PRICE_PER_KWH):
        raise ConfigError(say("A price per kWh of {price:g} cannot be used: give a price from 0 to 1,000 (any "
                              "currency).", price=price))
    return price
