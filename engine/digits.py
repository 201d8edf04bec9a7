"""A measured number written with the digits it has: significant figures, not fixed decimals, so 0.40 tok/s is
never "0 tok/s" and 0.3 ms never "0 ms". See docs/measuring.md#digits."""
from __future__ import annotations

import math

FIGURES = 2  # a measurement on a shared machine rarely holds a third figure; integers keep all theirs


def significant(x: float | None, figures: int = FIGURES, *, grouped: bool = True) -> str:
    """`x` with at least `figures` significant figures and never fewer digits than its whole part (354 stays
    354, 41.65 is 42, 1.234 is 1.2, 0.40 is 0.40, 0.0034 is 0.0034), thousands grouped (12,345); "–" for
    None, NaN or infinity. A zero is "0": no figure of it is measured."""
    if x is None or isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        return "–"
    if x == 0:
        return "0"
    decimals = _decimals(float(x), figures)
    return f"{x:,.{decimals}f}" if grouped else f"{x:.{decimals}f}"


def rounded(x: float | None, figures: int = FIGURES) -> float | None:
    """`x` rounded as `significant` writes it, kept a number (a table's column that sorts): 0.0412 is 0.041, not
    0.0; None for None, NaN or infinity."""
    if x is None or isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        return None
    return round(float(x), _decimals(float(x), figures)) if x else 0.0


def _decimals(x: float, figures: int) -> int:
    """The decimals that show `figures` significant figures of `x`, after rounding (0.0996 is 0.10, not 0.100)."""
    decimals = max(0, figures - 1 - math.floor(math.log10(abs(x))))
    near = round(x, decimals)
    if near and math.floor(math.log10(abs(near))) > math.floor(math.log10(abs(x))):
        decimals = max(0, decimals - 1)  # the rounding carried into a new leading digit
    return decimals
