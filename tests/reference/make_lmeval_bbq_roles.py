"""Regenerate ``tests/reference/bbq_answer_roles_from_lmeval.json``: what lm-eval 0.4.13's bbq task code says about
every document of the local BBQ data (all 17,628, no model), the oracle of tests/unit/test_bbq_task_code.py.

Per document, lm-eval's ``utils.process_docs`` then ``doc_to_targets`` (which continuations count as right) and
``doc_to_biased_answer`` (which continuations are the biased answer), written as two characters: the right answer
(``0``/``1``: that group answer; ``u``: any of the ten "unknown" continuations, 2 to 11) and the biased answers
(``-``: none, ``0``/``1``: that group answer, ``b``: both). With the continuations (checked by a digest of every
document's ``doc_to_choice``) these decide every per-document item of process_results for any answer, so the
aggregations see the same numbers for any log-likelihoods.

Runs in the scratch venv of make_lmeval_bbq_reference.py, on the rows scripts/shared_data_mirror.py serves::

    /work/lmeval-venv/bin/python tests/reference/make_lmeval_bbq_roles.py
"""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import importlib.util
import json
import pathlib
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent.parent
OUT = HERE / "bbq_answer_roles_from_lmeval.json"  # not lmeval_*.json: that name is a task run's reference


def load_mirror():
    spec = importlib.util.spec_from_file_location("shared_data_mirror", REPO / "scripts" / "shared_data_mirror.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def choices_digest(choices_per_document) -> str:
    digest = hashlib.sha256()
    for choices in choices_per_document:
        digest.update(json.dumps(choices, ensure_ascii=False).encode())
    return digest.hexdigest()


def role_code(targets: list[int], biased: list[int]) -> str:
    right = "u" if targets[0] >= 2 else str(targets[0])
    assert targets == ([int(right)] if right != "u" else list(range(2, 13))), targets
    assert set(biased) <= {0, 1}, biased
    return right + {(): "-", (0,): "0", (1,): "1", (0, 1): "b"}[tuple(sorted(biased))]


def main() -> None:
    import datasets
    from lm_eval.tasks.bbq import utils

    mirror = load_mirror()
    with tempfile.TemporaryDirectory() as scratch:
        data = mirror.build_mirror(pathlib.Path(scratch)) / mirror.BBQ_FOLDER / "test.jsonl"
        dataset = utils.process_docs(datasets.load_dataset("json", data_files={"test": str(data)}, split="test"))
        docs = list(dataset)
    codes = "".join(role_code(utils.doc_to_targets(doc), utils.doc_to_biased_answer(doc)) for doc in docs)
    OUT.write_text(json.dumps({
        "provenance": {"script": pathlib.Path(__file__).name, "lm_eval": md.version("lm_eval"),
                       "datasets": md.version("datasets"),
                       "data": "scripts/shared_data_mirror.py's oskarvanderwal/bbq/All/test.jsonl from "
                               "../shared/data/bbq",
                       "n_docs": len(docs)},
        "choices_sha256": choices_digest(utils.doc_to_choice(doc) for doc in docs),
        "roles": codes,
    }, indent=1) + "\n", encoding="utf-8")
    print(OUT, len(docs))


if __name__ == "__main__":
    main()
