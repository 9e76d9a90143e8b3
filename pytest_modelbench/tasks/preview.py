"""A prepared task as text: each document's context, continuations and gold answer (for a generate_until task the
reference answer; for a loglikelihood_rolling task the text), exactly as they are scored.

The context is shown verbatim, one `|` line per line of text; continuations are quoted as Python strings, so that the
target delimiter (usually a leading space) and any stray whitespace are visible.
"""

from __future__ import annotations

from typing import Sequence

from pytest_modelbench.tasks.requests import DocumentRequests
from pytest_modelbench.tasks.task import PreparedTask

CONTEXT_MARK = "|"
# The bias metrics (metrics/bias.py), and what the choices of a task scoring them are, in choice order.
_CHOICE_ROLES = (
    (frozenset({"pct_stereotype", "likelihood_diff"}), ("more stereotypical", "less stereotypical")),  # CrowS-Pairs
    (frozenset({"lms", "ss", "icat"}), ("stereotype", "anti-stereotype", "unrelated")),  # StereoSet
)


def preview_lines(prepared: PreparedTask) -> list[str]:
    config = prepared.config
    shown = len(prepared.documents)
    lines = [
        f"{config.task} ({config.source.name}): split '{config.eval_split}', {prepared.num_fewshot}-shot, "
        f"first {shown} document{'s' if shown != 1 else ''}"
    ]
    roles = choice_roles([spec.name for spec in config.metric_list])
    for doc in prepared.documents:
        lines += document_lines(doc, roles)
    return lines


def document_lines(doc: DocumentRequests, roles: tuple[str, ...] | None = None) -> list[str]:
    """A document as text; with `roles` (a bias task's choices) each continuation is marked by its role, not gold."""
    category = f", category {doc.category}" if doc.category is not None else ""
    if not doc.context and not doc.continuations:  # loglikelihood_rolling: the text alone is scored
        return [f"  document {doc.doc_id}{category}", f"    text: {doc.gold!r}"]
    lines = [f"  document {doc.doc_id}{category}", "    context:"]
    if doc.context:
        lines += [f"      {CONTEXT_MARK} {line}" for line in doc.context.split("\n")]
    else:
        lines.append("      (empty: each continuation is scored on its own)")
    if not doc.continuations:  # generate_until: the model answers; this is what the answer is scored against
        lines.append(f"    target: {doc.gold!r}")
        return lines
    lines.append("    continuations:")
    golds = set(doc.gold) if isinstance(doc.gold, tuple) else {doc.gold}
    for i, continuation in enumerate(doc.continuations):
        if roles is not None:
            mark = f"  <- {roles[i]}" if i < len(roles) else ""
        else:
            mark = "  <- gold" if i in golds else ""
        lines.append(f"      {i}: {continuation!r}{mark}")
    return lines


def choice_roles(metric_names: Sequence[str]) -> tuple[str, ...] | None:
    """What each choice of a bias task is, in choice order (None for a task with a gold answer): a bias task has no
    right answer, and its first choice is the stereotypical one."""
    names = set(metric_names)
    return next((roles for metrics, roles in _CHOICE_ROLES if names & metrics), None)
