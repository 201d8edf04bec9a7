"""A measured number written with the digits it has: significant figures, not fixed decimals, so 0.40 tok/s is
never "0 tok/s" and 0.3 ms never "0 ms". See docs/measuring.md#digits."""
from __future__ import annotations

import math
import numbers
from collections.abc import Iterable
from typing import TypeGuard

FIGURES = 2  # a measurement on a shared machine rarely holds a third figure; integers keep all theirs


def significant(x: float | None, figures: int = FIGURES, *, like: Iterable[float | None] = (),
                grouped: bool = True) -> str:
    """`x` with at least `figures` significant figures and never fewer digits than its whole part (354 stays
    354, 41.65 is 42, 1.234 is 1.2, 0.40 is 0.40, 0.0034 is 0.0034), thousands grouped (12,345); "–" for
    None, NaN or infinity. A zero is "0": no figure of it is measured. With `like` (a median's range), the
    decimals are those of the largest of `x` and `like`, so the numbers said together share them ("0.41,
    0.38–0.44"; "5,476, 1,563–5,630")."""
    if not _finite(x):
        return "–"
    top = max((abs(float(v)) for v in (x, *like) if _finite(v) and v), default=0.0)
    if not top:
        return "0"
    decimals = _decimals(top, figures)
    return f"{x:,.{decimals}f}" if grouped else f"{x:.{decimals}f}"


def times(ratio: float | None) -> str:
    """A ratio said as "N×": three figures below ten, two from ten up, where its interval is wider (1.18×, 21×;
    0.9996 is 1.00, 9.996 is 10)."""
    if not _finite(ratio):
        return "–"
    three = significant(ratio, 3, grouped=False)
    return three if abs(float(three)) < 10 else significant(ratio, 2)


def rounded(x: float | None, figures: int = FIGURES) -> float | None:
    """`x` rounded as `significant` writes it, kept a number (a table's column that sorts): 0.0412 is 0.041, not
    0.0; None for None, NaN or infinity."""
    if not _finite(x):
        return None
    return round(float(x), _decimals(float(x), figures)) if x else 0.0


def change(ratio: float | None) -> str:
    """A ratio as a signed change in per cent, without the sign "%": 1.21 is "+21", 0.9997 "-0.030" (never "-0",
    never "-0.0"), 1 "0"; "–" for no ratio."""
    if not _finite(ratio):
        return "–"
    # rounded past any change a measurement shows: equal means divided give 0.999999999999999, not -1e-13 %
    pct = round((float(ratio) - 1) * 100, 9)
    return f"{pct:+.0f}" if abs(pct) >= 1 else ("+" if pct > 0 else "") + significant(pct)


def _finite(x: object) -> TypeGuard[float]:
    return isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(x)


def _decimals(x: float, figures: int) -> int:
    """The decimals that show `figures` significant figures of `x`, after rounding (0.0996 is 0.10, not 0.100)."""
    decimals = max(0, figures - 1 - math.floor(math.log10(abs(x))))
    near = round(x, decimals)
    if near and math.floor(math.log10(abs(near))) > math.floor(math.log10(abs(x))):
        decimals = max(0, decimals - 1)  # the rounding carried into a new leading digit
    return decimals
