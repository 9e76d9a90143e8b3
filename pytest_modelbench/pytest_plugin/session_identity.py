"""The session a shard belongs to, as its run record states it (outputs/run_record.py): its gated tasks and their configs,
the alpha split, the gate policy, the baselines, the options that change the numbers, the packages. A shard derives
it from the items collected before the split (recording.py); a merge derives the same from its own collection
(merge_project.py) and compares.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from pytest_modelbench.gate.provenance import package_versions
from pytest_modelbench.pytest_plugin.gate_hooks import is_gated
from pytest_modelbench.pytest_plugin.shards import scored_tasks

# Run options that change the numbers. Where a shard runs (device, servers, data folder, cache) does not, nor where
# its checkpoint lies (--model, --model-args paths): the merge compares the weights' fingerprints, and the scorer's
# knobs are in each task's scoring protocol.
NUMBER_OPTIONS = ("dtype", "model_type", "batch_size", "num_fewshot", "limit",
                  "shared_prefixes", "allow_task_code", "apply_chat_template", "system_instruction",
                  "fewshot_as_multiturn")


def session_identity(session: Any, items: list[pytest.Item], options: Any) -> dict[str, Any]:
    """`session`: the gate session (gate_hooks.GateSession), after it counted the gated items; `items`: every item
    collected, before --shard keeps one shard's; `options`: the run's RunOptions."""
    return {
        "tasks": {item.task_id.key: _config_hash(item) for item in items if is_gated(item)},
        "alpha_split": session.alpha_split.as_json(),
        "gate": session.policy.as_json(),
        "baselines": session.store.fingerprint(),
        "options": {name: getattr(options, name) for name in NUMBER_OPTIONS},
        "packages": package_versions(),
    }


def _config_hash(item: pytest.Item) -> str:
    hashes = sorted(config_hash for _, config_hash, _ in scored_tasks(item))
    return hashes[0] if len(hashes) == 1 else hashlib.sha256("\n".join(hashes).encode()).hexdigest()[:16]
