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
    # A sampled task's draw: where and with what seed it sampled (another draw is comparable; scoring_protocol
    # says what it sampled); empty for every other task.
    sampling: str = ""


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


def scoring_protocol(evaluation: Any, backend: Any) -> str:
    """How the numbers were produced; a baseline scored under another protocol is not comparable.

    An explicit `scoring_protocol` carried by the evaluation wins; otherwise what was run (causal log-likelihood,
    masked pseudo-log-likelihood with the task's masked protocol, greedy generation, or sampled generation with its
    settings and draws a document: not its seed or batch size, sampling_draw's), the scorer's knobs from
    --model-args (add_bos_token, prefix_token_id, max_length) and the prompt format (--apply-chat-template, ...).
    """
    explicit = getattr(evaluation, "scoring_protocol", None) or getattr(evaluation.prepared, "scoring_protocol", None)
    if explicit:
        return str(explicit)
    leaves = getattr(evaluation, "leaves", None)
    if leaves is not None:  # a group (metrics/group_scores.py): its tasks' protocols, each once
        return " | ".join(dict.fromkeys(scoring_protocol(leaf, backend) for leaf in leaves))
    generated = getattr(evaluation, "generations", None) is not None
    if generated and evaluation.prepared.config.generation.sampling:
        # What is sampled, not which draw: another seed, batch size or sampler draws from the same distribution, and
        # the gate's paired test on the documents' draws sees that noise (sampling_draw records the draw).
        config = evaluation.prepared.config
        base = (f"causal-lm sampled generation ({config.generation.label()}; {config.draws} draw(s) a document), "
                "lm-eval 0.4.13 generate_until rules")
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


def sampling_draw(evaluation: Any, backend: Any, batch_size: int | str) -> str:
    """Which draw a sampled task's numbers are (a run reproduces its answers with all of it); '' when not sampled."""
    generations = getattr(evaluation, "generations", None)
    if generations is None or not evaluation.prepared.config.generation.sampling:
        return ""
    seed = evaluation.prepared.sampling_seed
    if str(getattr(backend, "device", "")).startswith("server"):  # the server's sampler: other draws than torch's
        return f"server sampler, seed {seed} per request (plus the draw's number)"
    return f"torch seed {seed} per task, batch size {batch_size}"


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
        scoring_protocol=scoring_protocol(evaluation, backend),
        dtype=(dtype or requested) if requested in ("auto", dtype) or not dtype else f"{requested} ({dtype})",
        batch_size=batch_size,
        device=backend.device,
        packages=package_versions(),
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        sampling=sampling_draw(evaluation, backend, batch_size),
    )


def stored_provenance(stored_text: str | None) -> dict[str, Any] | None:
    """The stored baseline's provenance as written, for reports; None when there is none to read."""
    try:
        provenance = json.loads(stored_text or "null")["provenance"]
    except Exception:
        return None
    return provenance if isinstance(provenance, dict) else None
