"""Speculative decoding as the server counted it over a run's measured part: how many drafted tokens it
accepted, and at which draft position. See docs/measuring.md#speculation."""
from __future__ import annotations

from dataclasses import dataclass

from engine.messages import Message, say


@dataclass(frozen=True)
class Speculation:
    drafts: float  # verification steps that carried a draft
    draft_tokens: float
    accepted: float
    accepted_at: tuple[float, ...]  # accepted tokens by draft position (0 = the first drafted token)

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.draft_tokens if self.draft_tokens else 0.0

    @property
    def mean_length(self) -> float:
        """Tokens each verification step produced on average: the one the target model makes, plus the
        drafted ones it accepted (vLLM's "mean acceptance length")."""
        return 1 + self.accepted / self.drafts if self.drafts else 1.0

    @property
    def rate_at(self) -> tuple[float, ...]:
        """How often the draft at each position was accepted, per draft."""
        return tuple(a / self.drafts for a in self.accepted_at) if self.drafts else ()


def of(run) -> Speculation | None:
    """The run's speculation counts; None when its server did not speculate (or did not say)."""
    d = run.extra.server_view.spec_decode if run.extra.server_view else None
    if d is None or not d.drafts:
        return None
    return Speculation(d.drafts, d.draft_tokens or 0.0, d.accepted or 0.0, tuple(d.accepted_at))


def said(run) -> Message | None:
    """One sentence: the acceptance, the tokens per step, by position; a random-weight model's said meaningless."""
    s = of(run)
    if s is None:
        return None
    positions = " / ".join(f"{r:.0%}" for r in s.rate_at)
    text = say("Speculative decoding: the server accepted {accepted:,.0f} of {drafted:,.0f} drafted tokens "
               "({rate:.0%}), {length:.2f} tokens per verification step on average; accepted by draft position: "
               "{positions}.", accepted=s.accepted, drafted=s.draft_tokens, rate=s.acceptance_rate,
               length=s.mean_length, positions=positions or "–")
    if run.extra.server.placeholder_text:
        return say("{sentence} The model's weights are random, so what it accepts says nothing of a real model's "
                   "text.", sentence=text)
    return text
