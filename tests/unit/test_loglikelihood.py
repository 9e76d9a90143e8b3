"""output_type loglikelihood (LAMBADA and friends): lm-eval 0.4.13's one request per document, the continuation's
log-likelihood and greedy flag, acc and perplexity, the score cache, and the backends that refuse it."""

from __future__ import annotations

import json
import math
import statistics
import textwrap

import jsonschema
import numpy as np
import pytest
import torch

from pytest_modelbench.errors import DocumentError, MetricError, ModelLoadError, TaskConfigError
from pytest_modelbench.run.evaluation import evaluate_task
from pytest_modelbench.metrics.loglikelihood import aggregate_perplexity
from pytest_modelbench.metrics.task_metrics import resolve_metrics
from pytest_modelbench.outputs.results import RESULTS_SCHEMA, results_document, task_results
from pytest_modelbench.scoring.causal import CausalLMScorer
from pytest_modelbench.tasks.config import load_task_config
from pytest_modelbench.tasks.identity import TaskId
from pytest_modelbench.tasks.task import prepare_task
from tests.fixtures.lambada_data import TASK_YAML, TEXTS, write_lambada_fixture

CONTEXT = "The quick brown fox"  # tiny_model's greedy 3-token continuation of it decodes and re-encodes to itself


def write_task(tmp_path, rows, extra=""):
    (tmp_path / "test.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    (tmp_path / "ll.yaml").write_text(textwrap.dedent("""
        task: ll
        dataset_path: json
        dataset_kwargs:
          data_files: {test: test.jsonl}
        test_split: test
        output_type: loglikelihood
        doc_to_text: context
        doc_to_target: target
        """) + textwrap.dedent(extra), encoding="utf-8")
    return load_task_config(tmp_path / "ll.yaml")


def by_definition(model, tokenizer, context: str, continuation: str) -> tuple[float, list[bool]]:
    """The continuation's log-likelihood (float64) and, per continuation token, whether it is the argmax given the
    tokens before it, from one forward over context + continuation (the tiny tokenizer adds no BOS, the context no
    trailing space: the joint tokens split at the context's own)."""
    context_ids, whole = tokenizer.encode(context), tokenizer.encode(context + continuation)
    assert whole[:len(context_ids)] == context_ids
    with torch.no_grad():
        logits = model(torch.tensor([whole[:-1]])).logits[0].double()
    positions = range(len(context_ids) - 1, len(whole) - 1)
    logprobs = torch.log_softmax(logits, dim=-1)
    return (sum(float(logprobs[p, whole[p + 1]]) for p in positions),
            [int(logits[p].argmax()) == whole[p + 1] for p in positions])


def greedy_tokens(model, ids: list[int], tokens: int) -> list[int]:
    """The `tokens` argmax tokens that follow `ids`, one forward each."""
    ids = list(ids)
    with torch.no_grad():
        for _ in range(tokens):
            ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
    return ids[-tokens:]


# --- requests ---------------------------------------------------------------------------------------------------


def test_lambada_requests_as_lm_eval_builds_them(tmp_path):
    write_lambada_fixture(tmp_path)
    (tmp_path / "lambada_openai.yaml").write_text(TASK_YAML, encoding="utf-8")
    prepared = prepare_task(load_task_config(tmp_path / "lambada_openai.yaml"), data_dir=tmp_path)
    assert [m.name for m in resolve_metrics(prepared.config)] == ["perplexity", "acc"]
    first = prepared.documents[0]
    assert (first.context, first.continuations, first.choices) == (
        "The sun rises in the east and sets in the", (" west",), ())
    assert [doc.context + doc.continuations[0] for doc in prepared.documents] == TEXTS


def test_the_target_follows_the_context_without_target_delimiter_shots_keep_it(tmp_path):
    # lm-eval 0.4.13 (construct_requests): arguments = (ctx, doc_to_target(doc)); the delimiter only joins shots.
    rows = [{"context": "Q1", "target": "a1"}, {"context": "Q2", "target": "a2"}]
    config = write_task(tmp_path, rows, 'target_delimiter: " => "\nfewshot_config:\n  sampler: first_n\n')
    doc = prepare_task(config, num_fewshot=1).documents[1]
    assert (doc.context, doc.continuations, doc.gold) == ("Q1 => a1\n\nQ2", ("a2",), "a2")


def test_a_target_that_is_not_text_names_the_document(tmp_path):
    config = write_task(tmp_path, [{"context": "Q", "target": 7}])
    with pytest.raises(DocumentError, match="document 0: a loglikelihood target must be text, got 7"):
        prepare_task(config)


def test_metric_lists_are_checked(tmp_path):
    rows = [{"context": "Q", "target": "a"}]
    assert [s.name for s in write_task(tmp_path, rows).metric_list] == ["perplexity", "acc"]  # lm-eval's default
    with pytest.raises(TaskConfigError, match="unknown metric 'acc_norm' in metric_list for a loglikelihood task "
                                              r"\(known: acc, perplexity\)"):
        resolve_metrics(write_task(tmp_path, rows, "metric_list:\n  - metric: acc_norm\n"))
    with pytest.raises(TaskConfigError, match="only 'perplexity' is supported, got 'mean'"):
        write_task(tmp_path, rows, "metric_list:\n  - metric: perplexity\n    aggregation: mean\n")
    multiple_choice = write_task(tmp_path, rows, "output_type: multiple_choice\ndoc_to_choice: ['a', 'b']\n"
                                                 "metric_list:\n  - metric: perplexity\n")
    with pytest.raises(TaskConfigError, match="unknown metric 'perplexity' in metric_list for a multiple_choice task"):
        resolve_metrics(multiple_choice)


# --- scoring: log-likelihood and greedy flag ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def known_greedy(tiny_loaded):
    """Continuations of CONTEXT whose tokens are tiny_model's argmax (all of them), all but the last, all but the
    first, and two others: only the first is greedy, and a check of one token alone gets the next two wrong."""
    model, tokenizer = tiny_loaded.model, tiny_loaded.tokenizer
    context = tokenizer.encode(CONTEXT)
    greedy, the = greedy_tokens(model, context, 3), tokenizer.encode(" the")
    targets = [tokenizer.decode(greedy), tokenizer.decode(greedy[:2] + the),
               tokenizer.decode(the + greedy_tokens(model, context + the, 2)), " jumps over"]
    rows = [{"context": CONTEXT, "target": target} for target in targets]
    rows.append({"context": "Many people live in", "target": " Ethiopia."})
    expected = [by_definition(model, tokenizer, row["context"], row["target"]) for row in rows]
    assert [argmax for _, argmax in expected[:3]] == [[True, True, True], [True, True, False], [False, True, True]]
    assert [all(argmax) for _, argmax in expected] == [True, False, False, False, False]
    return rows, [(ll, all(argmax)) for ll, argmax in expected]


@pytest.mark.parametrize("fast", [False, True])
def test_loglikelihood_and_greedy_flag_by_definition(tiny_loaded, known_greedy, tmp_path, fast):
    rows, expected = known_greedy
    prepared = prepare_task(write_task(tmp_path, rows))
    evaluation = evaluate_task(prepared, CausalLMScorer(tiny_loaded.model, tiny_loaded.tokenizer, fast=fast))
    assert evaluation.greedy == [True, False, False, False, False]
    assert [lls[0] for lls in evaluation.loglikelihoods] == pytest.approx([ll for ll, _ in expected], abs=1e-4)
    assert list(evaluation.scores.per_document["acc"]) == [1.0, 0.0, 0.0, 0.0, 0.0]
    document = results_document([task_results(TaskId("suite", "ll"), evaluation, log_samples=True)], {}, gate={})
    jsonschema.validate(document["samples"], json.loads(RESULTS_SCHEMA.read_text())["properties"]["samples"])
    assert [sample["is_greedy"] for sample in document["samples"]["suite/ll"]] == evaluation.greedy


def test_acc_and_perplexity_aggregate_as_lm_eval(tiny_loaded, known_greedy, tmp_path):
    rows, expected = known_greedy
    evaluation = evaluate_task(prepare_task(write_task(tmp_path, rows)),
                               CausalLMScorer(tiny_loaded.model, tiny_loaded.tokenizer))
    lls = [ll for ll, _ in expected]
    overall = evaluation.scores.overall
    assert overall["perplexity"].value == pytest.approx(math.exp(-sum(lls) / len(lls)), rel=1e-4)  # exp(-mean ll)
    assert list(evaluation.scores.per_document["perplexity"]) == pytest.approx(lls, abs=1e-4)
    assert overall["acc"].value == pytest.approx(1 / 5)
    assert overall["acc"].stderr == pytest.approx(statistics.stdev([1, 0, 0, 0, 0]) / math.sqrt(5))


def test_perplexity_by_hand():
    assert aggregate_perplexity({"perplexity": np.array([-1.0, -3.0])}, []) == pytest.approx(math.exp(2.0))
    with pytest.raises(MetricError, match="perplexity exp\\(800.0\\) is too large to represent"):
        aggregate_perplexity({"perplexity": np.array([-800.0])}, [])


def test_an_empty_continuation_names_the_document(tiny_loaded, tmp_path):
    prepared = prepare_task(write_task(tmp_path, [{"context": "Q", "target": "a"}, {"context": "Q", "target": ""}]))
    with pytest.raises(DocumentError, match="document 1, continuation '': the continuation is empty after "
                                            "tokenization"):
        evaluate_task(prepared, CausalLMScorer(tiny_loaded.model, tiny_loaded.tokenizer))


# --- the score cache ------------------------------------------------------------------------------------------------


def test_a_re_run_takes_log_likelihoods_and_flags_from_the_cache(tiny_loaded, known_greedy, tmp_path, monkeypatch):
    from pytest_modelbench.scoring.score_cache import ScoreCache

    rows, _ = known_greedy
    prepared = prepare_task(write_task(tmp_path, rows))

    def cached_scorer() -> CausalLMScorer:
        return CausalLMScorer(tiny_loaded.model, tiny_loaded.tokenizer, cache=ScoreCache(tmp_path / "scores.sqlite"),
                              fingerprint="files:tiny")

    uncached = CausalLMScorer(tiny_loaded.model, tiny_loaded.tokenizer).loglikelihood_task(prepared)
    # An earlier multiple-choice run cached the same requests' log-likelihoods, not their flags: all are scored.
    cached_scorer().loglikelihood([(row["context"], row["target"]) for row in rows])
    first = cached_scorer()
    scored = []
    original = first._forward_greedy
    monkeypatch.setattr(first, "_forward_greedy", lambda batch: scored.extend(batch) or original(batch))
    assert first.loglikelihood_task(prepared) == uncached and len(scored) == len(rows)
    warm = cached_scorer()
    monkeypatch.setattr(warm, "_forward_greedy", lambda batch: pytest.fail("a cached request was scored"))
    assert warm.loglikelihood_task(prepared) == uncached


# --- backends that cannot give greedy flags -------------------------------------------------------------------------


def test_masked_and_server_backends_refuse_loglikelihood_naming_task_and_backend(tmp_path):
    from pytest_modelbench.scoring.masked import MaskedLMScorer
    from pytest_modelbench.scoring.server.scorer import ServerScorer

    prepared = prepare_task(write_task(tmp_path, [{"context": "Q", "target": "a"}]))
    for backend, name in ((MaskedLMScorer, "masked LM"), (ServerScorer, r"scoring server \(--server-url\)")):
        with pytest.raises(ModelLoadError, match=f"ll.yaml: task 'll': loglikelihood tasks are not supported by the "
                                                 f"{name} backend yet; run them on a local causal LM"):
            backend.loglikelihood_task(object(), prepared)
