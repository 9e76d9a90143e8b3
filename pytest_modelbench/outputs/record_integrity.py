"""A run record's seal: a digest of its content, and a signature where the shards hold a key.

The digest is sha256 over the record's canonical JSON (sorted keys, no spaces, every field but `digest` and
`signature`), so an edit by hand or a damaged transfer is found and named, whatever the file's layout. Anyone can
compute a digest, so it does not stop a deliberate edit: where shards run on machines the gate does not trust, a key
in MODELBENCH_RECORD_KEY makes the shard sign the same bytes with HMAC-SHA256 and the merge verify them (a merge with
the key refuses unsigned and wrongly signed records; a merge without it refuses signed records, which it cannot
verify). `load` parses a record's text with bounds on size and nesting, so a damaged or hostile file is a one-line
problem rather than a MemoryError or RecursionError.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from typing import Any, Mapping

from pytest_modelbench.gate.baseline_file import canonical_json

KEY_ENV = "MODELBENCH_RECORD_KEY"
DIGEST_PREFIX = "sha256:"
SIGNATURE_PREFIX = "hmac-sha256:"
SEAL_FIELDS = ("digest", "signature")
MAX_BYTES = 2**30  # a record of every task of the shipped suites is well under 100 MB
MAX_DEPTH = 32  # a record nests 8 levels; the candidate records inside it are strings


class SealProblem(Exception):
    """What is wrong with a record's text or seal (the caller names the record)."""


def record_key() -> bytes | None:
    """The signing key from MODELBENCH_RECORD_KEY (its UTF-8 bytes), None when unset or empty."""
    value = os.environ.get(KEY_ENV, "")
    return value.encode("utf-8") if value else None


def sealed(document: Mapping[str, Any], key: bytes | None) -> dict[str, Any]:
    """`document` with its digest, and its signature when a key is given."""
    content = canonical_json(document, without=SEAL_FIELDS)
    seal = {"digest": DIGEST_PREFIX + hashlib.sha256(content).hexdigest()}
    if key is not None:
        seal["signature"] = SIGNATURE_PREFIX + hmac.new(key, content, hashlib.sha256).hexdigest()
    return {**document, **seal}


def check_seal(document: Mapping[str, Any], key: bytes | None) -> None:
    """SealProblem unless the digest matches the content and, with a key, the signature does too."""
    digest, signature = document.get("digest"), document.get("signature")
    if not isinstance(digest, str) or not digest.startswith(DIGEST_PREFIX):
        raise SealProblem("it has no digest (key 'digest'); write it again by re-running its shard")
    content = canonical_json(document, without=SEAL_FIELDS)
    if not hmac.compare_digest(digest, DIGEST_PREFIX + hashlib.sha256(content).hexdigest()):
        raise SealProblem("its content does not match its digest: it was edited or damaged after its shard wrote "
                          "it; re-run the shard")
    if key is None:
        if signature is not None:
            raise SealProblem(f"it is signed, but {KEY_ENV} is not set here: set it to the shards' key to verify "
                              "the signature")
        return
    if not isinstance(signature, str) or not signature.startswith(SIGNATURE_PREFIX):
        raise SealProblem(f"it is not signed, and {KEY_ENV} is set: run its shard with the same {KEY_ENV}")
    if not hmac.compare_digest(signature, SIGNATURE_PREFIX + hmac.new(key, content, hashlib.sha256).hexdigest()):
        raise SealProblem(f"its signature does not match {KEY_ENV}: it was signed with another key or edited")


def load(data: bytes) -> Any:
    """The JSON value of a record's bytes; SealProblem for a text too large, not UTF-8 JSON, or nested too deeply."""
    if len(data) > MAX_BYTES:
        raise SealProblem(f"it is {len(data)} bytes, more than a run record can be ({MAX_BYTES})")
    try:
        value = json.loads(data.decode("utf-8"), parse_constant=_no_constant)
    except RecursionError:
        raise SealProblem(f"it is nested more than {MAX_DEPTH} levels deep") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise SealProblem(f"it is not JSON ({exc})") from None
    _check_depth(value)
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def _check_depth(value: Any) -> None:
    level = [value]
    for _ in range(MAX_DEPTH + 1):
        level = [child for node in level
                 for child in (node.values() if isinstance(node, dict) else node if isinstance(node, list) else ())]
        if not level:
            return
    raise SealProblem(f"it is nested more than {MAX_DEPTH} levels deep")
