"""Chat-template prompts (--apply-chat-template, --system-instruction, shots as turns) against lm-eval 0.4.13.

Oracle: tests/reference/lmeval_chat_*.json, written by lm-eval 0.4.13 itself with `--apply_chat_template
--system_instruction ...` (its CLI then presents shots as turns) on suites/arc_gen's YAMLs (raw generations and
filtered answers) and on arc_challenge_mt_fi 2-shot (requests; the file also holds lm-eval's log-likelihoods),
default model, float32, batch size 1, --limit 5 (tests/reference/make_lmeval_reference.py, runs `chat`, `chat_mc`).
"""

from __future__ import annotations

import pytest

from pytest_modelbench.run.evaluation import evaluate_task
from pytest_modelbench.scoring.causal import CausalLMScorer
from pytest_modelbench.tasks.prompt_format import prompt_format
from pytest_modelbench.tasks.task import prepare_task
from tests.fixtures.lmeval_references import REFERENCE_DIR, load_reference, reference_task

CHAT_REFERENCES = sorted(p.name for p in REFERENCE_DIR.glob("lmeval_chat_*.json"))


@pytest.mark.slow
@pytest.mark.parametrize("name", CHAT_REFERENCES, ids=lambda name: name.removeprefix("lmeval_chat_"))
def test_chat_prompts_and_generations_match_lm_eval(name, data_mirror, default_model):
    reference = load_reference(name)
    _, plain = reference_task(name, data_mirror, {})
    provenance = reference["provenance"]
    chat = prompt_format(default_model.tokenizer, True, provenance["system_instruction"],
                         provenance["fewshot_as_multiturn"])
    prepared = prepare_task(plain.config, data_dir=data_mirror, num_fewshot=provenance["num_fewshot"],
                            limit=provenance["limit"], prompt_format=chat)
    samples = reference["samples"]
    if plain.config.output_type == "multiple_choice":
        # The requests decide the log-likelihoods (the scoring itself is held to lm-eval in test_lmeval_parity.py);
        # scoring these long chat prompts again would cost 17 s here.
        assert [[[doc.context, c] for c in doc.continuations] for doc in prepared.documents] == [
            s["requests"] for s in samples]
        return
    assert [doc.context for doc in prepared.documents] == [s["context"] for s in samples]
    evaluation = evaluate_task(prepared, CausalLMScorer(default_model.model, default_model.tokenizer))
    assert evaluation.generations == [s["generation"] for s in samples]
    assert evaluation.answers == [s["filtered"] for s in samples]
