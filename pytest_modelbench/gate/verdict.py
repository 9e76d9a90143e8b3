"""Verdicts: what an entry (or a task, or a pooled entry) is found to be against its baseline, and the rule that gives
an entry its verdict from its p-values, standard error and margin (`judge_entry`).
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from pytest_modelbench.gate.evidence.significance import upper_quantile


class Verdict(enum.Enum):
    PASS = "pass"
    IMPROVED = "improved"
    REGRESSED = "regressed"
    INCONCLUSIVE = "inconclusive"


@dataclass(frozen=True)
class EntryVerdict:
    """An entry's verdict with the numbers it rests on."""

    verdict: Verdict
    delta: float
    p_value: float  # the verdict's own: p_better for IMPROVED, else p_worse
    mde: float  # smallest regression caught with 80% power, same units as delta
    margin: float


def judge_entry(
    delta: float,
    *,
    p_worse: float,
    p_better: float,
    standard_error: float,
    margin: float,
    alpha: float,
    mde: float,
) -> EntryVerdict:
    """Verdict for one gated entry.

    delta: candidate - baseline, oriented so that positive is better.
    p_worse: p-value of "not worse than -margin", already adjusted for the other entries by the caller.
    p_better: p-value of "not better than +margin".
    standard_error: standard error of delta; margin: the non-inferiority margin, >= 0, same units as delta.
    alpha: the level the entry's family is tested at; mde: from `detectable_regression`, reported as is.

    Rules, first match wins:
      1. REGRESSED     p_worse < alpha: the data show the candidate worse than the margin
      2. IMPROVED      p_better < alpha: the data show it better than the margin
      3. PASS          the one-sided (1 - alpha) bound delta - z_{1-alpha} × SE is not below -margin: the data show
                       the entry within the margin
      4. INCONCLUSIVE  otherwise: the data cannot tell (too few documents for the margin); the entry passes
    An unchanged model (delta 0, SE 0) is a PASS; a tiny sample whose documents all moved the same way (SE 0) is
    not REGRESSED unless the caller's p_worse says so (McNemar's exact tail does for 0/1 outcomes).
    """
    if not math.isfinite(delta):
        raise ValueError(f"delta must be finite, got {delta}")
    for name, p in (("p_worse", p_worse), ("p_better", p_better)):
        if not 0 <= p <= 1:
            raise ValueError(f"{name} must lie in [0, 1], got {p}")
    if margin < 0 or standard_error < 0:
        raise ValueError(f"margin and standard_error must be >= 0, got {margin}, {standard_error}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if p_worse < alpha:
        verdict = Verdict.REGRESSED
    elif p_better < alpha:
        verdict = Verdict.IMPROVED
    elif delta - upper_quantile(alpha) * standard_error >= -margin:
        verdict = Verdict.PASS
    else:
        verdict = Verdict.INCONCLUSIVE
    p_value = p_better if verdict is Verdict.IMPROVED else p_worse
    return EntryVerdict(verdict=verdict, delta=delta, p_value=p_value, mde=mde, margin=margin)
