"""A backend's results are checked where they come back to the evaluation: one value per request sent, each of the
right kind, else a BackendError naming the backend and the task (it used to end in an IndexError or an empty argmax
inside a metric, or to drop the extra values without a word)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from pytest_modelbench.errors import BackendError, DocumentError
from pytest_modelbench.run.evaluation import evaluate_task
from pytest_modelbench.pytest_plugin.fixtures import ModelbenchModel
from pytest_modelbench.scoring.backend import BackendInfo
from pytest_modelbench.scoring.masked import MaskedLMScorer
from tests.fixtures.tiny_bert import build_tiny_bert
from tests.fixtures.toy_tasks import toy_task as write_toy_task

ROWS = [{"q": "Which gas?", "choices": ["oxygen", "nitrogen"], "label": 0, "text": "The quick brown fox."},
        {"q": "Which metal?", "choices": ["iron", "gold"], "label": 1, "text": "He couldn't figure it out."}]
KEYS = {
    "multiple_choice": 'doc_to_text: "{{q}}"\ndoc_to_target: label\ndoc_to_choice: choices\n',
    "generate_until": 'doc_to_text: "{{q}}"\ndoc_to_target: "{{choices[label]}}"\n',
    "loglikelihood_rolling": "doc_to_target: text\n",
}


class FakeBackend:
    """Returns the values it was given, whatever it is asked."""

    def __init__(self, values):
        self.values = values

    def score_task(self, prepared):
        return self.values

    def generate_task(self, prepared):
        return self.values

    def rolling_loglikelihood_task(self, prepared):
        return self.values

    def loglikelihood(self, requests):
        return self.values

    def describe(self) -> BackendInfo:
        return BackendInfo("org/fake", "fake", "causal", "", "cpu")


def toy_task(tmp_path, output_type: str):
    return write_toy_task(tmp_path, ROWS, output_type, KEYS[output_type])


@pytest.mark.parametrize("values", [[-1.0, -2.0, -3.0], [-1.0, -2.0, -3.0, -4.0, -5.0], []])
def test_too_few_or_too_many_log_likelihoods_name_backend_and_task(tmp_path, values):
    prepared = toy_task(tmp_path, "multiple_choice")  # 2 documents of 2 choices: 4 requests
    with pytest.raises(BackendError, match=rf"toy\.yaml: task 'toy': backend FakeBackend \(model 'org/fake'\) "
                                           rf"returned {len(values)} log-likelihoods for 4 requests; a backend "
                                           "returns one log-likelihood per request, in order"):
        evaluate_task(prepared, FakeBackend(values))


@pytest.mark.parametrize(("output_type", "values", "message"), [
    ("generate_until", ["oxygen"], "returned 1 generation for 2 requests"),
    ("generate_until", ["oxygen", "gold", "iron"], "returned 3 generations for 2 requests"),
    ("loglikelihood_rolling", [-10.0], "returned 1 log-likelihood for 2 requests"),
    ("loglikelihood_rolling", [-10.0, -11.0, -12.0], "returned 3 log-likelihoods for 2 requests"),
])
def test_generations_and_rolling_values_are_counted_too(tmp_path, output_type, values, message):
    with pytest.raises(BackendError, match=rf"toy\.yaml: task 'toy': backend FakeBackend .*{message}"):
        evaluate_task(toy_task(tmp_path, output_type), FakeBackend(values))


@pytest.mark.parametrize(("output_type", "values", "message"), [
    ("multiple_choice", [[-1.0, -2.0], [-3.0, -4.0], -5.0, -6.0], r"returned \[-1\.0, -2\.0\] \(list\) as "
                                                                   r"log-likelihood 0, not a number"),
    ("multiple_choice", None, "returned a NoneType for 4 requests"),
    ("generate_until", ["oxygen", None], r"returned None \(NoneType\) as generation 1, not text"),
])
def test_values_of_the_wrong_kind_name_backend_and_position(tmp_path, output_type, values, message):
    with pytest.raises(BackendError, match=message):
        evaluate_task(toy_task(tmp_path, output_type), FakeBackend(values))


def test_the_right_count_evaluates(tmp_path):
    evaluation = evaluate_task(toy_task(tmp_path, "multiple_choice"), FakeBackend([-1.0, -2.0, -0.5, -3.0]))
    assert evaluation.loglikelihoods == [[-1.0, -2.0], [-0.5, -3.0]]
    assert evaluation.scores.overall["acc"].value == 0.5  # document 0 picks its gold 0; document 1 picks 0, gold 1


def test_custom_tests_loglikelihood_is_counted_too():
    model = ModelbenchModel(SimpleNamespace(backend=lambda: FakeBackend([-1.0])), config=None)
    with pytest.raises(BackendError, match=r"modelbench_model\.loglikelihood: backend FakeBackend \(model 'org/fake'\) "
                                           r"returned 1 log-likelihood for 2 requests"):
        model.loglikelihood([("", "The cats sleep."), ("", "The cats sleeps.")])


class DroppingTokenizer:
    """A tokenizer whose text alone loses its last token (what a tokenizer that encodes the pair differently from its
    parts looks like to the masked scorer)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.mask_token_id = tokenizer.mask_token_id
        self.pad_token_id = tokenizer.pad_token_id

    def __call__(self, *texts, add_special_tokens=True, **kwargs):
        encoded = self.tokenizer(*texts, add_special_tokens=add_special_tokens, **kwargs)
        if not add_special_tokens:
            encoded["input_ids"] = encoded["input_ids"][:-1]
        return encoded


def test_masked_scorer_that_cannot_locate_the_continuation_names_the_document(tmp_path):
    from pytest_modelbench.scoring.loading import load_model, resolve_model_source

    bert = load_model(resolve_model_source(str(build_tiny_bert(tmp_path / "bert", seed=0))), dtype="float32",
                      masked=True)
    scorer = MaskedLMScorer(bert.model, DroppingTokenizer(bert.tokenizer))
    with pytest.raises(DocumentError, match=r"toy\.yaml: task 'toy', document 0: cannot locate the continuation's "
                                            r"tokens: the tokenizer gave \d+ non-special tokens"):
        evaluate_task(toy_task(tmp_path, "multiple_choice"), scorer)


def test_a_short_batch_is_refused_before_anything_reaches_the_cache(tmp_path):
    from pytest_modelbench.scoring.cached import score_requests
    from pytest_modelbench.scoring.score_cache import ScoreCache

    def compute(todo, on_done):
        on_done(list(range(len(todo))), [-1.0] * (len(todo) - 1))  # one value lost: the rest would shift

    cache = ScoreCache(tmp_path / "scores.sqlite")
    requests = [("a", " b"), ("a", " c"), ("a", " d")]
    with pytest.raises(BackendError, match="batch of 3 requests came back with 2 values"):
        score_requests(requests, compute, namespace="ns", cache=cache, progress=None)
    seen = []
    score_requests(requests, lambda todo, on_done: (seen.extend(todo), on_done(todo, [-2.0] * len(todo))),
                   namespace="ns", cache=cache, progress=None)
    assert seen == [0, 1, 2]  # nothing of the short batch was cached
