"""loglikelihood_rolling: lm-eval 0.4.13's rolling windows, per-document text log-likelihoods and the perplexities."""

from __future__ import annotations

import json
import math
import re
import textwrap

import pytest
import torch

from pytest_modelbench.errors import TaskConfigError
from pytest_modelbench.run.evaluation import evaluate_task
from pytest_modelbench.scoring.causal import CausalLMScorer
from pytest_modelbench.scoring.rolling import rolling_windows
from pytest_modelbench.scoring.tokenization import EncodedRequest
from pytest_modelbench.tasks.config import load_task_config
from pytest_modelbench.tasks.task import prepare_task

TEXTS = ["The quick brown fox jumps over the lazy dog near the river bank.", "He couldn't figure out the rope.",
         "প্রশ্ন: বাংলাদেশের রাজধানী কোথায়?"]


def test_windows_as_lm_eval_cuts_them():
    # Worked by hand from lm-eval's get_rolling_token_windows(context_len=1) + make_disjoint_window, max_seq_len 3.
    assert rolling_windows([1, 2, 3, 4, 5, 6, 7], prefix_token=0, max_length=3) == [
        EncodedRequest((0,), (1, 2, 3)), EncodedRequest((3,), (4, 5, 6)), EncodedRequest((4, 5, 6), (7,)),
    ]
    assert rolling_windows([1, 2], prefix_token=0, max_length=3) == [EncodedRequest((0,), (1, 2))]
    assert rolling_windows([], prefix_token=0, max_length=3) == []


def windowed_loglikelihood(model, tokens, prefix, max_length):
    """By definition: each token's log-probability given the at most `max_length` tokens before it in its window."""
    total, ids = 0.0, [prefix] + list(tokens)
    with torch.no_grad():
        for window_start in range(0, len(tokens), max_length):
            context_start = max(window_start - (max_length - min(max_length, len(tokens) - window_start)), 0)
            span = ids[context_start: window_start + min(max_length, len(tokens) - window_start) + 1]
            logprobs = torch.log_softmax(model(torch.tensor([span[:-1]])).logits[0].double(), dim=-1)
            first = window_start - context_start  # position predicting the window's first token
            for k in range(first, len(span) - 1):
                total += float(logprobs[k, span[k + 1]])
    return total


def write_rolling_task(tmp_path, extra=""):
    (tmp_path / "test.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS), encoding="utf-8")
    (tmp_path / "ppl.yaml").write_text(textwrap.dedent("""
        task: ppl
        dataset_path: json
        dataset_kwargs:
          data_files: {test: test.jsonl}
        test_split: test
        output_type: loglikelihood_rolling
        doc_to_target: text
        """) + textwrap.dedent(extra), encoding="utf-8")
    return load_task_config(tmp_path / "ppl.yaml")


def test_document_values_and_perplexities(tiny_loaded, tmp_path):
    model, tokenizer = tiny_loaded.model, tiny_loaded.tokenizer
    evaluation = evaluate_task(prepare_task(write_rolling_task(tmp_path)),
                               CausalLMScorer(model, tokenizer, max_length=8))
    prefix = tokenizer.bos_token_id
    expected = [windowed_loglikelihood(model, tokenizer.encode(t), prefix, 8) for t in TEXTS]
    assert len(tokenizer.encode(TEXTS[0])) > 16  # three windows or more
    assert [lls[0] for lls in evaluation.loglikelihoods] == pytest.approx(expected, abs=1e-4)
    total, words = sum(expected), sum(len(re.split(r"\s+", t)) for t in TEXTS)
    n_bytes = sum(len(t.encode("utf-8")) for t in TEXTS)
    overall = evaluation.scores.overall
    assert overall["word_perplexity"].value == pytest.approx(math.exp(-total / words), rel=1e-4)
    assert overall["byte_perplexity"].value == pytest.approx(math.exp(-total / n_bytes), rel=1e-4)
    assert overall["bits_per_byte"].value == pytest.approx(-total / n_bytes / math.log(2), rel=1e-4)


def test_a_re_run_takes_every_window_from_the_score_cache(tiny_loaded, tmp_path, monkeypatch):
    from pytest_modelbench.scoring.score_cache import ScoreCache

    prepared = prepare_task(write_rolling_task(tmp_path))
    uncached = CausalLMScorer(tiny_loaded.model, tiny_loaded.tokenizer, max_length=8).rolling_loglikelihood_task(prepared)

    def cached_scorer(max_length: int) -> CausalLMScorer:
        return CausalLMScorer(tiny_loaded.model, tiny_loaded.tokenizer, max_length=max_length,
                              cache=ScoreCache(tmp_path / "scores.sqlite"), fingerprint="files:tiny")

    assert cached_scorer(8).rolling_loglikelihood_task(prepared) == uncached
    warm = cached_scorer(8)
    monkeypatch.setattr(warm, "score_encoded", lambda *args, **kwargs: pytest.fail("a cached window was scored"))
    assert warm.rolling_loglikelihood_task(prepared) == uncached
    # Another max_length cuts other windows, which are scored rather than confused with the cached ones.
    scored = []
    other = cached_scorer(6)
    original = other.score_encoded
    monkeypatch.setattr(other, "score_encoded", lambda windows, **kwargs: scored.extend(windows) or original(windows, **kwargs))
    assert other.rolling_loglikelihood_task(prepared) != uncached and scored


def test_rolling_metric_lists_are_checked(tmp_path):
    with pytest.raises(TaskConfigError, match="unknown metric 'acc' in metric_list for a loglikelihood_rolling task"):
        from pytest_modelbench.metrics.task_metrics import resolve_metrics

        resolve_metrics(write_rolling_task(tmp_path, "metric_list:\n  - metric: acc\n"))
    config = write_rolling_task(tmp_path, "metric_list:\n  - metric: word_perplexity\n"
                                          "    aggregation: weighted_perplexity\n")
    assert [spec.name for spec in config.metric_list] == ["word_perplexity"]
    with pytest.raises(TaskConfigError, match="only 'bits_per_byte' is supported, got 'mean'"):
        write_rolling_task(tmp_path, "metric_list:\n  - metric: bits_per_byte\n    aggregation: mean\n")


def test_a_target_that_is_not_text_names_the_document(tmp_path):
    from pytest_modelbench.errors import DocumentError

    config = write_rolling_task(tmp_path)
    (tmp_path / "test.jsonl").write_text('{"text": 7}\n{"text": 8}\n', encoding="utf-8")
    with pytest.raises(DocumentError, match="document 0: a loglikelihood_rolling target must be text, got 7"):
        prepare_task(config)
