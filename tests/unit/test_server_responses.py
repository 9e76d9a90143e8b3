"""Each server response is checked against the token ids sent, in whatever form the server answers: vLLM's echoed
`token_id:N` tokens position by position, else the exact count of log-probabilities, the server's own count of
prompt tokens (`usage.prompt_tokens`) and the text offsets. The answers here are written by hand, so each case is
exactly the response described; tests/unit/test_server_backend.py sends the same faults over HTTP."""

from __future__ import annotations

import pytest

from pytest_modelbench.errors import ServerError
from pytest_modelbench.scoring.server.client import CompletionsServer

URL = "http://node:8000/v1"
PROMPT = [11, 12, 13, 14]
RIGHT = [-2.0, -3.0, -4.0]  # log P(12 | 11), log P(13 | 11 12), log P(14 | 11 12 13)


class AnsweringServer(CompletionsServer):
    """A server whose every answer to /completions is `body`."""

    def __init__(self, body: dict):
        super().__init__(URL, timeout_s=1.0)
        self.body = body

    def _call(self, method, path, payload):
        return self.body


def response(tokens, values, *, prompt_tokens: int | None = len(PROMPT), text_offset=None) -> dict:
    logprobs = {"tokens": tokens, "token_logprobs": values, "top_logprobs": None}
    if text_offset is not None:
        logprobs["text_offset"] = text_offset
    body = {"choices": [{"index": 0, "text": "", "finish_reason": "length", "logprobs": logprobs}]}
    if prompt_tokens is not None:
        body["usage"] = {"prompt_tokens": prompt_tokens, "completion_tokens": 1,
                         "total_tokens": prompt_tokens + 1}
    return body


def ids(*tokens: int) -> list[str]:
    return [f"token_id:{t}" for t in tokens]


TEXT = ["The", " cat", " sat", " on", " the"]  # the prompt's four tokens as text, then the generated one


def scored(body: dict) -> list[float]:
    return AnsweringServer(body).prompt_logprobs("m", [PROMPT])[0]


@pytest.mark.parametrize("body", [
    pytest.param(response(TEXT, [None, *RIGHT, -0.5], text_offset=[0, 3, 7, 11, 14]), id="text-tokens-with-usage"),
    pytest.param(response(TEXT, [None, *RIGHT, -0.5], text_offset=[-1] * 5), id="sglang-offsets-not-reported"),
    pytest.param(response(ids(*PROMPT, 7), [None, *RIGHT, -0.5], prompt_tokens=None), id="vllm-token-ids"),
    pytest.param(response(ids(*PROMPT), [None, *RIGHT], prompt_tokens=None), id="vllm-token-ids-no-generated"),
])
def test_answers_that_can_be_checked_are_accepted_with_the_prompt_values(body):
    """These pass on the old code too (it accepted any long enough list): here so that no check refuses them."""
    assert scored(body) == RIGHT


@pytest.mark.parametrize(("body", "message"), [
    pytest.param(response([*TEXT, " mat"], [None, -1.0, *RIGHT, -0.5], prompt_tokens=5),
                 r"6 log-probabilities for a prompt of 4 tokens and 1 generated token, and no echoed token ids",
                 id="extra-leading-token-too-long"),
    pytest.param(response(TEXT, [None, -1.0, *RIGHT], prompt_tokens=5),
                 r"scored 5 prompt tokens where 4 were sent",
                 id="extra-leading-token-generated-dropped"),
    pytest.param(response(TEXT, [None, -1.0, *RIGHT], prompt_tokens=None),
                 r"echoes no token ids .* and reports no usage.prompt_tokens",
                 id="no-ids-no-usage"),
    pytest.param(response(None, [None, -1.0, *RIGHT, -0.5]),
                 r"6 log-probabilities for a prompt of 4 tokens and 1 generated token",
                 id="no-tokens-too-long"),
    pytest.param(response(ids(*PROMPT, 7), [None, -1.0, *RIGHT, -0.5], prompt_tokens=None),
                 r"5 tokens for 6 log-probabilities",
                 id="ids-with-one-value-too-many"),
    pytest.param(response(ids(*PROMPT, 7, 8), [None, *RIGHT, -0.5, -0.6], prompt_tokens=None),
                 r"6 log-probabilities for a prompt of 4 tokens and 1 generated token: more than",
                 id="ids-with-two-generated"),
    pytest.param(response(["token_id:10", " cat", " sat", " on", " the"], [None, *RIGHT, -0.5]),
                 r"echoed token ids for some prompt tokens but ' cat' at position 1",
                 id="ids-mixed-with-text"),
    pytest.param(response(TEXT, [None, *RIGHT, -0.5], text_offset=[0, 3, 2, 11, 14]),
                 r"text offsets \[0, 3, 2, 11, 14\] do not fit its 5 log-probabilities",
                 id="offsets-decreasing"),
    pytest.param(response(TEXT, [None, *RIGHT, -0.5], text_offset=[0, 3, 7, 11]),
                 r"text offsets \[0, 3, 7, 11\] do not fit its 5 log-probabilities",
                 id="offsets-one-short"),
])
def test_answers_that_do_not_match_the_tokens_sent_are_refused(body, message):
    with pytest.raises(ServerError, match=message) as error:
        scored(body)
    assert URL in str(error.value)

