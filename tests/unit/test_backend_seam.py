"""A backend written only against the documented seam (scoring/backend.py) runs a multiple_choice task end to end
through the front the real backends use (scoring/front.py), and what it returns is checked there: too few values, a
NaN, a row of the wrong shape or a value of the wrong kind is a named error naming the backend, the task and the first
bad position."""

from __future__ import annotations

import math

import pytest

from pytest_modelbench.errors import BackendResultError, ModelLoadError, NonFiniteResultError
from pytest_modelbench.run.evaluation import evaluate_task
from pytest_modelbench.scoring.backend import BackendInfo, DocumentRequest, LoglikelihoodRequest
from pytest_modelbench.scoring.front import ScoringFront
from pytest_modelbench.scoring.score_cache import ScoreCache
from tests.fixtures.toy_tasks import toy_task as write_toy_task

# What the test backend "knows": the answer it prefers for each question. It knows three of the four gold answers
# and prefers a wrong one for the fourth, so accuracy is 3/4 by construction.
PREFERRED = {"2 + 2?": "4", "Capital of France?": "Paris", "Colour of the sky?": "blue", "Largest planet?": "Saturn"}
ROWS = [
    {"q": "2 + 2?", "choices": ["3", "4", "5"], "label": 1},
    {"q": "Capital of France?", "choices": ["Paris", "Rome"], "label": 0},
    {"q": "Colour of the sky?", "choices": ["green", "blue"], "label": 1},
    {"q": "Largest planet?", "choices": ["Jupiter", "Saturn"], "label": 0},
]


class KnowingBackend:
    """Log-likelihood 0 for the answer it prefers, -1 per character for any other."""

    def __init__(self):
        self.scored: list[LoglikelihoodRequest] = []

    def loglikelihoods(self, requests, on_batch=None):
        self.scored += requests
        return [self.value(request) for request in requests]

    def value(self, request: LoglikelihoodRequest) -> float:
        question = request.context.removeprefix("Question: ").removesuffix("\nAnswer:")
        return 0.0 if PREFERRED[question] == request.continuation.strip() else -float(len(request.continuation))

    def describe(self) -> BackendInfo:
        return BackendInfo("test/knowing", "test:knowing", "causal", "", "nowhere")


class CachedKnowingBackend(KnowingBackend):
    def cache_namespace(self, shared_tokens):
        return "test:knowing"


MULTIPLE_CHOICE = "doc_to_target: label\ndoc_to_choice: choices\n"


def toy_task(tmp_path, output_type="multiple_choice", keys=MULTIPLE_CHOICE):
    return write_toy_task(tmp_path, ROWS, output_type, 'doc_to_text: "Question: {{q}}\\nAnswer:"\n' + keys)


def test_a_backend_of_the_seam_alone_runs_a_multiple_choice_task(tmp_path):
    backend = KnowingBackend()
    evaluation = evaluate_task(toy_task(tmp_path), ScoringFront(backend))
    assert evaluation.scores.overall["acc"].value == 0.75
    assert evaluation.loglikelihoods == [[-2.0, 0.0, -2.0], [0.0, -5.0], [-6.0, 0.0], [-8.0, 0.0]]
    # the front sends every choice of every document, documents in order, each once
    assert [(r.context, r.continuation) for r in backend.scored] == [
        (f"Question: {row['q']}\nAnswer:", f" {choice}") for row in ROWS for choice in row["choices"]]


def test_the_front_caches_what_a_seam_backend_returns(tmp_path):
    prepared, cache = toy_task(tmp_path), ScoreCache(tmp_path / "scores.sqlite")
    first = evaluate_task(prepared, ScoringFront(CachedKnowingBackend(), cache=cache))
    rerun = CachedKnowingBackend()
    again = evaluate_task(prepared, ScoringFront(rerun, cache=ScoreCache(tmp_path / "scores.sqlite")))
    assert again.loglikelihoods == first.loglikelihoods and rerun.scored == []


def test_a_backend_without_an_output_type_names_the_task_and_itself(tmp_path):
    with pytest.raises(ModelLoadError, match=r"toy\.yaml: task 'toy': loglikelihood tasks are not supported by the "
                                             r"KnowingBackend backend"):
        evaluate_task(toy_task(tmp_path, "loglikelihood", 'doc_to_target: "{{choices[label]}}"\n'),
                      ScoringFront(KnowingBackend()))


# --- what comes back is checked ------------------------------------------------------------------------------------


class ReturningBackend(KnowingBackend):
    """Returns what `change` makes of the right values."""

    def __init__(self, change):
        super().__init__()
        self.change = change

    def loglikelihoods(self, requests, on_batch=None):
        return self.change(super().loglikelihoods(requests))


def evaluate_with(tmp_path, change):
    return evaluate_task(toy_task(tmp_path), ScoringFront(ReturningBackend(change)))


def test_too_few_values_name_the_backend_the_task_and_the_first_request_without_one(tmp_path):
    with pytest.raises(BackendResultError, match=r"toy\.yaml: task 'toy', document 3, choice 1 \(' Saturn'\): backend "
                                                 r"ReturningBackend \(model 'test/knowing'\) returned 8 values for 9 "
                                                 r"requests"):
        evaluate_with(tmp_path, lambda values: values[:-1])


def test_too_many_values_are_refused_too(tmp_path):
    with pytest.raises(BackendResultError, match=r"returned 10 values for 9 requests"):
        evaluate_with(tmp_path, lambda values: values + [0.0])


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_a_non_finite_value_names_its_document_and_choice(tmp_path, bad):
    def spoil(values):
        values[4] = bad
        return values

    with pytest.raises(NonFiniteResultError, match=r"toy\.yaml: task 'toy', document 1, choice 1 \(' Rome'\): the "
                                                   r"model gave a non-finite log-likelihood .*ReturningBackend"):
        evaluate_with(tmp_path, spoil)


def test_a_value_of_the_wrong_shape_names_its_position(tmp_path):
    with pytest.raises(BackendResultError, match=r"document 0, choice 0 \(' 3'\): backend ReturningBackend .*returned "
                                                 r"\[-2\.0\] \(list\), not a number"):
        evaluate_with(tmp_path, lambda values: [[value] for value in values])


def test_a_batch_with_fewer_values_than_positions_is_refused_before_the_cache(tmp_path):
    class ShortBatch(CachedKnowingBackend):
        def loglikelihoods(self, requests, on_batch=None):
            values = super().loglikelihoods(requests)
            on_batch(list(range(len(requests))), values[:-1])
            return values

    cache = ScoreCache(tmp_path / "scores.sqlite")
    with pytest.raises(BackendResultError, match="a batch of 9 positions with 8 values; nothing of it was cached"):
        evaluate_task(toy_task(tmp_path), ScoringFront(ShortBatch(), cache=cache))
    assert cache.writes == 0


class DocumentBackend(KnowingBackend):
    """Scores whole documents (as a masked LM does); `rows` changes what it returns."""

    def __init__(self, rows=lambda rows: rows):
        super().__init__()
        self.rows = rows

    def document_loglikelihoods(self, requests: list[DocumentRequest], on_batch=None):
        return self.rows([[self.value(LoglikelihoodRequest(r.context, c)) for c in r.continuations] for r in requests])


def test_a_document_backend_gives_the_same_scores(tmp_path):
    evaluation = evaluate_task(toy_task(tmp_path), ScoringFront(DocumentBackend()))
    assert evaluation.scores.overall["acc"].value == 0.75


def test_a_document_row_of_the_wrong_length_names_the_document(tmp_path):
    with pytest.raises(BackendResultError, match=r"toy\.yaml: task 'toy', document 0: backend DocumentBackend .*"
                                                 r"returned \[-2\.0, 0\.0\] for a document of 3 continuations"):
        evaluate_task(toy_task(tmp_path), ScoringFront(DocumentBackend(lambda rows: [row[:2] for row in rows])))


# --- generate_until and loglikelihood_rolling through the same seam --------------------------------------------------


class AnsweringBackend(KnowingBackend):
    """Answers each question with the answer it prefers; a text's log-likelihood is -1 per character."""

    def __init__(self, answers=lambda answers: answers, values=lambda values: values):
        super().__init__()
        self.answers, self.values, self.generated = answers, values, []

    def generate(self, requests, on_batch=None):
        self.generated += requests
        return self.answers([" " + PREFERRED[r.context.removeprefix("Question: ").removesuffix("\nAnswer:")]
                             for r in requests])

    def rolling_loglikelihoods(self, requests, on_batch=None):
        return self.values([-float(len(request.text)) for request in requests])

    def generation_cache_namespace(self):
        return "test:answering"


GENERATION = 'doc_to_target: " {{choices[label]}}"\ngeneration_kwargs: {until: ["\\n"], max_gen_toks: 4}\n'
ROLLING = "doc_to_target: q\n"


def test_a_seam_backend_answers_a_generate_until_task_from_plain_requests(tmp_path):
    backend = AnsweringBackend()
    evaluation = evaluate_task(toy_task(tmp_path, "generate_until", GENERATION), ScoringFront(backend))
    assert evaluation.scores.overall["exact_match,none"].value == 0.75
    first = backend.generated[0]
    assert (first.context, first.settings.until, first.settings.max_gen_toks, first.settings.sampling) == (
        "Question: 2 + 2?\nAnswer:", ("\n",), 4, False)


def test_the_front_caches_answers_by_request(tmp_path):
    prepared, path = toy_task(tmp_path, "generate_until", GENERATION), tmp_path / "scores.sqlite"
    first = evaluate_task(prepared, ScoringFront(AnsweringBackend(), cache=ScoreCache(path)))
    rerun = AnsweringBackend()
    assert evaluate_task(prepared, ScoringFront(rerun, cache=ScoreCache(path))).generations == first.generations
    assert rerun.generated == []


@pytest.mark.parametrize(("answers", "message"), [
    (lambda answers: answers[:-1], r"document 3: backend AnsweringBackend .*returned 3 values for 4 requests"),
    (lambda answers: [1.0] * len(answers), r"document 0: backend AnsweringBackend .*returned 1\.0 \(float\), not text"),
])
def test_generations_are_checked_too(tmp_path, answers, message):
    with pytest.raises(BackendResultError, match=message):
        evaluate_task(toy_task(tmp_path, "generate_until", GENERATION), ScoringFront(AnsweringBackend(answers)))


def test_a_seam_backend_scores_a_rolling_task_and_a_nan_names_its_document(tmp_path):
    evaluation = evaluate_task(toy_task(tmp_path, "loglikelihood_rolling", ROLLING), ScoringFront(AnsweringBackend()))
    assert evaluation.loglikelihoods == [[-float(len(row["q"]))] for row in ROWS]

    def spoil(values):
        values[2] = math.nan
        return values

    with pytest.raises(NonFiniteResultError, match=r"toy\.yaml: task 'toy', document 2: the model gave a non-finite"):
        evaluate_task(toy_task(tmp_path, "loglikelihood_rolling", ROLLING), ScoringFront(AnsweringBackend(values=spoil)))


# --- a --backend MODULE:FACTORY's identity methods, checked behind CheckedBackend

FACTORY_MODULE = '''
from pytest_modelbench.scoring.backend import BackendInfo

class Backend:
    def __init__(self, describe, namespace):
        self._describe, self._namespace = describe, namespace

    def loglikelihoods(self, requests, on_batch=None):
        return [0.0 for _ in requests]

    def describe(self):
        return self._describe()

    def cache_namespace(self, shared_tokens):
        return self._namespace()

def good():
    return BackendInfo("m", "fp", "causal", "", "cpu")

def raises():
    raise RuntimeError("no weights here")

def make(model, model_args, device):
    return Backend({"good": good, "raises": raises, "dict": lambda: {"name": "m"},
                    "number": lambda: BackendInfo("m", 7, "causal", "", "cpu"),
                    "kind": lambda: BackendInfo("m", "fp", "seq2seq", "", "cpu")}[model],
                   {"shared": lambda: "shared-namespace", "int": lambda: 3}[model_args or "shared"])

def make_other(model, model_args, device):
    backend = make(model, model_args, device)
    backend.describe = lambda: BackendInfo("other", "fp-other", "causal", "", "cpu")
    return backend
'''


@pytest.fixture
def factory_module(tmp_path):
    from pytest_modelbench.scoring.custom_backend import BackendFactory

    (tmp_path / "seam_factory.py").write_text(FACTORY_MODULE, encoding="utf-8")
    yield lambda spec="seam_factory:make": BackendFactory(spec, rootdir=tmp_path)
    import sys
    sys.modules.pop("seam_factory", None)


@pytest.mark.parametrize(("model", "message"), [
    ("raises", r"Backend.describe\(\) raised RuntimeError: no weights here"),
    ("dict", r"Backend.describe\(\) returned dict \{'name': 'm'\}, not a BackendInfo"),
    ("number", r"Backend.describe\(\) returned a BackendInfo whose fingerprint is 7, not a string"),
    ("kind", r"Backend.describe\(\) returned model_type 'seq2seq'; it is one of causal, masked"),
])
def test_a_backend_that_cannot_say_what_it_is_fails_when_built(factory_module, model, message):
    with pytest.raises(ModelLoadError, match=r"^--backend seam_factory:make: " + message):
        factory_module().build(model=model, model_args=None, device="cpu")


def test_a_cache_namespace_that_is_not_a_string_names_the_backend(factory_module):
    backend = factory_module().build(model="good", model_args="int", device="cpu")
    with pytest.raises(ModelLoadError, match=r"Backend.cache_namespace\(\) returned int 3, not a string or None"):
        backend.cache_namespace(False)


def test_two_backends_that_reuse_a_namespace_do_not_share_scores(factory_module):
    """The score cache was keyed by the backend's own namespace only: another backend that reused the string read
    the first one's scores."""
    first = factory_module().build(model="good", model_args=None, device="cpu")
    other = factory_module("seam_factory:make_other").build(model="good", model_args=None, device="cpu")
    assert first.backend.cache_namespace(False) == other.backend.cache_namespace(False) == "shared-namespace"
    assert first.cache_namespace(False) != other.cache_namespace(False)
    assert first.cache_namespace(False) == factory_module().build(model="good", model_args=None,
                                                                  device="cpu").cache_namespace(False)
    assert "seam_factory:make" in first.cache_namespace(False)
