"""Provenance: where a record's numbers come from (model and weights, task config, data, limit, few-shot count,
scoring protocol, dtype, batch size, device, package versions, date), and which of it must match for a stored
baseline to be compared with a candidate run (COMPARABILITY_KEYS: a difference is "re-baseline required",
baseline.comparability_problems).
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import platform
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Mapping

from pytest_modelbench.tasks.generation_settings import SAMPLING_SEED

# Provenance keys whose difference makes a baseline incomparable ("re-baseline required").
COMPARABILITY_KEYS = {
    "task_config_hash": "task config",
    "data_fingerprint": "dataset",
    "limit": "limit",
    "num_fewshot": "num_fewshot",
    "scoring_protocol": "scoring protocol",
}

CAUSAL_PROTOCOL = "causal-lm loglikelihood, lm-eval 0.4.13 request rules"
MASKED_PROTOCOL = "masked-lm pseudo-log-likelihood"
GENERATION_PROTOCOL = "causal-lm greedy generation, lm-eval 0.4.13 generate_until rules"
PACKAGES = ("pytest-modelbench", "torch", "transformers", "tokenizers", "datasets", "numpy")


@dataclass(frozen=True)
class Provenance:
    model: str
    model_fingerprint: str
    task_config_hash: str
    data_fingerprint: str
    limit: int | None
    num_fewshot: int
    scoring_protocol: str
    dtype: str
    batch_size: int | str
    device: str
    packages: Mapping[str, str] = field(default_factory=dict)
    created: str = ""


def provenance_problems(stored: Provenance, candidate: Provenance) -> list[str]:
    """What changed between a stored baseline's provenance and the candidate's, of what must match (empty: nothing)."""
    problems = []
    for key, label in COMPARABILITY_KEYS.items():
        old, new = getattr(stored, key), getattr(candidate, key)
        if old != new:
            problems.append(f"{label} changed ({old!r} → {new!r})")
    return problems


def package_versions() -> dict[str, str]:
    return dict(_installed_versions())


@functools.cache
def _installed_versions() -> dict[str, str]:
    """Read once a process: each lookup parses the package's metadata file, and a task's record asks for every one."""
    versions = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return versions


def scoring_protocol(evaluation: Any, backend: Any, batch_size: int | str) -> str:
    """How the numbers were produced; a baseline scored under another protocol is not comparable.

    An explicit `scoring_protocol` carried by the evaluation wins; otherwise what was run (causal log-likelihood,
    masked pseudo-log-likelihood with the task's masked protocol, greedy generation, or sampled generation with its
    settings, seed and batch size), the scorer's knobs from --model-args (add_bos_token, prefix_token_id, max_length)
    and the prompt format (--apply-chat-template, ...).
    """
    explicit = getattr(evaluation, "scoring_protocol", None) or getattr(evaluation.prepared, "scoring_protocol", None)
    if explicit:
        return str(explicit)
    leaves = getattr(evaluation, "leaves", None)
    if leaves is not None:  # a group (metrics/group_scores.py): its tasks' protocols, each once
        return " | ".join(dict.fromkeys(scoring_protocol(leaf, backend, batch_size) for leaf in leaves))
    generated = getattr(evaluation, "generations", None) is not None
    if generated and evaluation.prepared.config.generation.sampling:
        # The seed and the batch size choose the draw, so a run reproduces its baseline's answers only with both.
        settings = evaluation.prepared.config.generation.label()
        if str(getattr(backend, "device", "")).startswith("server"):  # the server's sampler: other draws than torch's
            base = (f"causal-lm sampled generation on a server ({settings}; seed {SAMPLING_SEED} per request), "
                    "lm-eval 0.4.13 generate_until rules")
        else:
            base = (f"causal-lm sampled generation ({settings}; torch seed {SAMPLING_SEED} per task, batch size "
                    f"{batch_size}), lm-eval 0.4.13 generate_until rules")
    elif generated:
        base = GENERATION_PROTOCOL
    elif getattr(backend, "model_type", "causal") == "masked":
        masked = getattr(evaluation.prepared.config, "masked_protocol", None) or "pll"
        base = f"{MASKED_PROTOCOL} ({masked})"
    else:
        base = CAUSAL_PROTOCOL
    knobs = "".join(f"; {k}={v}" for k, v in sorted((getattr(backend, "scorer_kwargs", None) or {}).items()))
    prompt = getattr(evaluation.prepared, "prompt_label", "")  # chat template, system instruction
    return base + knobs + (f"; {prompt}" if prompt else "")


def provenance(evaluation: Any, runner: Any) -> Provenance:
    """Where the candidate's numbers come from: model, weights, task config, data, protocol, packages."""
    backend = runner.backend().describe()
    options = runner.options
    prepared = evaluation.prepared
    dtype = backend.dtype
    requested = str(options.dtype)
    batch_size = runner.batch_size_for(prepared.config.output_type)
    return Provenance(
        model=str(backend.name or options.model),
        model_fingerprint=str(backend.fingerprint),
        task_config_hash=prepared.config.config_hash,
        data_fingerprint=prepared.data_fingerprint,
        limit=prepared.limit,
        num_fewshot=int(prepared.num_fewshot),
        scoring_protocol=scoring_protocol(evaluation, backend, batch_size),
        dtype=(dtype or requested) if requested in ("auto", dtype) or not dtype else f"{requested} ({dtype})",
        batch_size=batch_size,
        device=backend.device,
        packages=package_versions(),
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )


def stored_provenance(stored_text: str | None) -> dict[str, Any] | None:
    """The stored baseline's provenance as written, for reports; None when there is none to read."""
    try:
        provenance = json.loads(stored_text or "null")["provenance"]
    except Exception:
        return None
    return provenance if isinstance(provenance, dict) else None
