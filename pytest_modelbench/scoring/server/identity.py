"""Which weights a server serves, told by their log-probabilities, not by the name it reports.

A server does not expose its weights, and the same URL and model name can serve another checkpoint tomorrow. So
every server in a run scores a fixed probe (a few short texts, tokenized by the run's tokenizer) and the values
identify the weights: two probes within `PROBE_TOLERANCE` of each other at every position are the same weights.
Probes seen before are kept beside the score cache (`server-identities.json`), each with the fingerprint it was
given, so a later run on the same weights gets the same fingerprint (and reuses its cached scores) although servers
are not bit-for-bit repeatable, and a different checkpoint gets a new one. The fingerprint goes into the score
cache's keys and the baseline's provenance.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from pathlib import Path
from typing import Any, Sequence

from pytest_modelbench.atomic_files import write_text_atomic

REGISTRY_FILE = "server-identities.json"
# Same weights served twice differ by ~1e-5 (batching, kernels); a fine-tune moves some probe token by far more.
PROBE_TOLERANCE = 1e-3
PROBE_TEXTS = (
    "The committee met on Tuesday to review the budget, and after a long discussion it approved the plan.",
    "def mean(values):\n    return sum(values) / len(values)\n",
    "Water boils at 100 degrees Celsius at sea level; at higher altitudes it boils at a lower temperature.",
    "বাংলাদেশের রাজধানী ঢাকা। Die Hauptstadt von Deutschland ist Berlin.",
)


def probe_prompts(encode) -> list[list[int]]:
    """The probe as token ids (`encode`: the run's tokenizer, BOS as it adds it)."""
    return [list(encode(text)) for text in PROBE_TEXTS]


def same_weights(first: Sequence[float], second: Sequence[float]) -> bool:
    return len(first) == len(second) and all(abs(a - b) <= PROBE_TOLERANCE for a, b in zip(first, second))


def fingerprint(probe: Sequence[float], tokenizer: str, registry: Path | None) -> str:
    """The fingerprint of a probe: that of a registered probe within the tolerance, else a new one (registered)."""
    entries = _read(registry) if registry is not None else []
    for entry in entries or []:
        if entry.get("tokenizer") == tokenizer and same_weights(entry.get("probe", []), probe):
            return str(entry["fingerprint"])
    rounded = json.dumps([tokenizer, [round(v, 2) for v in probe]])
    new = "probe:" + hashlib.sha256(rounded.encode()).hexdigest()[:16]
    if registry is not None and entries is not None:
        entries.append({"fingerprint": new, "tokenizer": tokenizer, "probe": list(probe)})
        try:
            write_text_atomic(registry, json.dumps(entries, indent=1))
        except OSError as exc:
            warnings.warn(f"pytest-modelbench: cannot record the server's identity in {registry} ({exc}); "
                          "a later run will not reuse this run's cached scores", stacklevel=2)
    return new


def _read(registry: Path) -> list[dict[str, Any]] | None:
    """The registered probes; None (and a warning, the file left alone) when the file is not a registry."""
    try:
        entries = json.loads(registry.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:
        warnings.warn(f"pytest-modelbench: {registry} is not readable as a server identity registry ({exc}); "
                      "ignoring it, cached server scores will not be reused", stacklevel=3)
        return None
    if not isinstance(entries, list) or not all(isinstance(e, dict) and "fingerprint" in e for e in entries):
        warnings.warn(f"pytest-modelbench: {registry} is not a server identity registry; ignoring it",
                      stacklevel=3)
        return None
    return entries
