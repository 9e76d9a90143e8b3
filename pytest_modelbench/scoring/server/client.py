"""One OpenAI-compatible server: `GET /v1/models` and prompt log-probabilities from `POST /v1/completions`.

Prompts go as token ids with `echo: true, logprobs: 0, max_tokens: 1`, several per request. Every response is checked
against the token ids sent before a value is used: one choice per prompt, finite numbers, and proof that the
log-probabilities belong to the tokens sent, in one of two forms:
- echoed ids (vLLM's `return_tokens_as_token_ids` makes it echo `token_id:N`): they must equal the ids sent,
  position by position, with at most the one generated token after them;
- no echoed ids (SGLang, for one, echoes token text): exactly one log-probability per prompt token plus the generated
  one, and the server's own count of prompt tokens (`usage.prompt_tokens`) equal to the count sent, so a token it
  added (a BOS, say) is caught rather than shifting every value by one. A response without that count cannot be
  checked and is refused.
Text offsets, where given, must fit the log-probabilities (one per token, never decreasing). A server that gives
log-probabilities for generated tokens only (llama.cpp's server, for one) is refused: summing what it returns would
score every choice alike.

Generations (`generate`, for generate_until) go as token ids too, with the stop sequences, the token budget and the
decoding settings, and must come back with the generated token ids (`logprobs: 0` with vLLM's
`return_tokens_as_token_ids`): one choice per prompt, a known finish reason, at most the tokens asked for. What the
ids must mean (the stops honoured, the text their decoding) is checked by the scorer, which holds the tokenizer.

Connection errors, timeouts, 429 and 5xx are transient (`ServerUnavailable`: the pool retries, here or on another
server); anything else the server says is final (`ServerError` naming the server).
"""

from __future__ import annotations

import http.client
import json
import math
import os
import random
import socket
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any, Callable, Sequence, TypeVar

from pytest_modelbench.errors import ServerError

API_KEY_ENV = "OPENAI_API_KEY"
TOKEN_ID_PREFIX = "token_id:"
GENERATED_TOKENS = 1  # max_tokens: the server generates one token after the echoed prompt
BACKOFF_S = 0.5
MAX_BACKOFF_S = 8.0
T = TypeVar("T")


class ServerUnavailable(ServerError):
    """A failure worth retrying: the server may answer later, or another server may take the work."""


class ServerTimeout(ServerUnavailable):
    """No answer within the request timeout: the server may be slow, or hung (it accepts connections and never
    answers); the pool counts these per server (pool.py)."""


class ServerRefused(ServerError):
    """The server answered that the request is invalid (HTTP 400, 422): not worth retrying as it is."""


@dataclass(frozen=True)
class Generated:
    """One generation as a server returned it: the generated token ids, its text and why it ended."""

    ids: tuple[int, ...]
    text: str
    finish_reason: str  # "stop" (a stop sequence or end of sequence) or "length" (the token budget)
    server: str  # the URL of the server that generated it


FINISH_REASONS = ("stop", "length")


@dataclass(frozen=True)
class ServedModel:
    """What `/v1/models` reports about the model a server serves."""

    id: str
    root: str | None
    max_model_len: int | None
    owned_by: str | None


class CompletionsServer:
    def __init__(self, url: str, timeout_s: float):
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s

    def __str__(self) -> str:
        return self.url

    def served_models(self) -> list[ServedModel]:
        body = self._call("GET", "/models", None)
        entries = body.get("data") if isinstance(body, dict) else None
        if not isinstance(entries, list) or not all(isinstance(e, dict) and isinstance(e.get("id"), str)
                                                    for e in entries):
            raise ServerError(f"server {self.url}: /models did not return a list of models")
        return [ServedModel(e["id"], _optional(e.get("root"), str), _optional(e.get("max_model_len"), int),
                            _optional(e.get("owned_by"), str)) for e in entries]

    def prompt_logprobs(self, model: str, prompts: Sequence[Sequence[int]]) -> list[list[float]]:
        """For each prompt, log P(token i | tokens before it) for i = 1 .. len(prompt) - 1."""
        payload = {"model": model, "prompt": [list(p) for p in prompts], "echo": True, "logprobs": 0,
                   "max_tokens": GENERATED_TOKENS, "temperature": 0, "return_tokens_as_token_ids": True}
        body = self._call("POST", "/completions", payload)
        by_index = self._choices(body, len(prompts))
        checked = [self._checked(by_index[i], prompts[i]) for i in range(len(prompts))]
        if not all(ids_echoed for _, ids_echoed in checked):
            self._check_prompt_token_count(body, prompts)
        return [values for values, _ in checked]

    def generate(self, model: str, prompts: Sequence[Sequence[int]], *, max_tokens: int, stop: Sequence[str],
                 settings: dict[str, Any]) -> list[Generated]:
        """For each prompt (token ids), the server's generation: at most `max_tokens` tokens, stopping at any of `stop`
        or at end of sequence, with the decoding `settings` (temperature, top_p, seed, ...: scorer.py)."""
        payload = {"model": model, "prompt": [list(p) for p in prompts], "max_tokens": max_tokens,
                   "stop": [s for s in stop if s], "echo": False, "n": 1, "logprobs": 0,
                   "return_tokens_as_token_ids": True, "skip_special_tokens": True,
                   "include_stop_str_in_output": False, "ignore_eos": False, **settings}
        body = self._call("POST", "/completions", payload)
        choices = self._choices(body, len(prompts))
        return [self._generated(choices[i], max_tokens) for i in range(len(prompts))]

    # --- checks -----------------------------------------------------------------------------------------------------

    def _choices(self, body: Any, count: int) -> dict[int, Any]:
        choices = body.get("choices") if isinstance(body, dict) else None
        if not isinstance(choices, list) or len(choices) != count:
            got = len(choices) if isinstance(choices, list) else "no"
            raise ServerError(f"server {self.url}: {got} completions for {count} prompts")
        by_index = {c.get("index", i) if isinstance(c, dict) else i: c for i, c in enumerate(choices)}
        if sorted(by_index) != list(range(count)):
            raise ServerError(f"server {self.url}: completion indices {sorted(by_index)} do not match the prompts")
        return by_index

    def _generated(self, choice: Any, max_tokens: int) -> Generated:
        text = choice.get("text") if isinstance(choice, dict) else None
        if not isinstance(text, str):
            raise ServerError(f"server {self.url}: a generation came back without its text")
        reason = choice.get("finish_reason")
        if reason not in FINISH_REASONS:
            raise ServerError(f"server {self.url}: a generation ended with finish_reason {reason!r}, not one of "
                              f"{', '.join(FINISH_REASONS)}: it did not finish")
        logprobs = choice.get("logprobs")
        tokens = logprobs.get("tokens") if isinstance(logprobs, dict) else None
        ids = [_token_id(t) for t in tokens] if isinstance(tokens, list) else None
        if ids is None or any(i is None for i in ids):
            shown = "no tokens" if ids is None else f"token {tokens[ids.index(None)]!r}"
            raise ServerError(
                f"server {self.url} returned a generation with {shown} where generated token ids were asked for "
                "(vLLM's return_tokens_as_token_ids): without them its text cannot be checked against the tokens "
                "the model generated; serve the model with vLLM"
            )
        if len(ids) > max_tokens:
            raise ServerError(f"server {self.url} generated {len(ids)} tokens where at most {max_tokens} were asked "
                              "for (max_tokens): it does not honour the task's max_gen_toks")
        return Generated(tuple(ids), text, reason, self.url)

    def _checked(self, choice: Any, prompt: Sequence[int]) -> tuple[list[float], bool]:
        """The prompt's log-probabilities, and whether echoed token ids showed they belong to the tokens sent (if not,
        the caller checks the server's count of prompt tokens)."""
        logprobs = choice.get("logprobs") if isinstance(choice, dict) else None
        values = logprobs.get("token_logprobs") if isinstance(logprobs, dict) else None
        if not isinstance(values, list):
            raise ServerError(f"server {self.url}: a completion came back without log-probabilities")
        if len(values) < len(prompt):
            if len(values) <= 1:
                raise ServerError(
                    f"server {self.url} returned log-probabilities for the generated token only, none for the prompt: "
                    "it does not support echo with logprobs (a known llama.cpp server limitation), so it cannot score "
                    "log-likelihoods; serve the model with vLLM or another server that echoes prompt log-probabilities"
                )
            raise ServerError(
                f"server {self.url}: {len(values)} log-probabilities for a prompt of {len(prompt)} tokens (truncated)"
            )
        echoed = self._echoed_ids(logprobs, prompt, len(values))
        expected = len(prompt) + GENERATED_TOKENS
        counted = (f"{len(values)} log-probabilities for a prompt of {len(prompt)} tokens and {GENERATED_TOKENS} "
                   "generated token")
        if echoed is None and len(values) != expected:
            raise ServerError(
                f"server {self.url}: {counted}, and no echoed token ids to tell which tokens they belong to (a token "
                "added before the prompt would shift every value): refusing rather than guessing"
            )
        if echoed is not None and len(values) > expected:
            raise ServerError(f"server {self.url}: {counted}: more than it was asked for")
        if echoed is not None and echoed != list(prompt):
            at = next(i for i, (a, b) in enumerate(zip(echoed, prompt)) if a != b)
            raise ServerError(
                f"server {self.url} echoed token {echoed[at]} at position {at} where {prompt[at]} was sent: it "
                "did not score the tokens sent"
            )
        self._check_text_offsets(logprobs, len(values))
        scored = values[1: len(prompt)]
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in scored):
            bad = next(v for v in scored if not (isinstance(v, (int, float)) and math.isfinite(v)))
            raise ServerError(f"server {self.url}: a prompt log-probability is {bad!r}, not a finite number")
        return [float(v) for v in scored], echoed is not None

    def _echoed_ids(self, logprobs: dict, prompt: Sequence[int], count: int) -> list[int] | None:
        """The ids echoed for the prompt's tokens; None when the server echoed no ids (token text, or no tokens)."""
        tokens = logprobs.get("tokens")
        if tokens is None:
            return None
        if not isinstance(tokens, list) or len(tokens) != count:
            given = f"{len(tokens)} tokens" if isinstance(tokens, list) else "tokens that are not a list"
            raise ServerError(f"server {self.url}: {given} for {count} log-probabilities: cannot tell which token "
                              "each log-probability belongs to")
        echoed = [_token_id(t) for t in tokens[: len(prompt)]]
        if all(t is None for t in echoed):
            return None
        if any(t is None for t in echoed):
            at = echoed.index(None)
            raise ServerError(f"server {self.url} echoed token ids for some prompt tokens but {tokens[at]!r} at "
                              f"position {at}: cannot check that it scored the tokens sent")
        return echoed

    def _check_text_offsets(self, logprobs: dict, count: int) -> None:
        offsets = logprobs.get("text_offset")
        if offsets is None or (isinstance(offsets, list) and all(o == -1 for o in offsets)):
            return  # not given (SGLang writes -1 for each token)
        if not (isinstance(offsets, list) and len(offsets) == count
                and all(isinstance(o, int) and not isinstance(o, bool) and o >= 0 for o in offsets)
                and all(a <= b for a, b in zip(offsets, offsets[1:]))):
            shown = str(offsets) if len(str(offsets)) <= 80 else str(offsets)[:77] + "..."
            raise ServerError(f"server {self.url}: text offsets {shown} do not fit its {count} log-probabilities "
                              "(one per token, from 0 up, never decreasing): it did not score the tokens sent")

    def _check_prompt_token_count(self, body: dict, prompts: Sequence[Sequence[int]]) -> None:
        """Without echoed ids, the server's own count of the prompt tokens it scored must be the count sent."""
        usage = body.get("usage")
        counted = usage.get("prompt_tokens") if isinstance(usage, dict) else None
        sent = sum(len(p) for p in prompts)
        if not isinstance(counted, int) or isinstance(counted, bool):
            raise ServerError(
                f"server {self.url} echoes no token ids (vLLM's return_tokens_as_token_ids) and reports no "
                "usage.prompt_tokens, so nothing shows that its log-probabilities belong to the tokens sent: its "
                "answers cannot be checked; serve the model with vLLM, or a server that echoes token ids or reports "
                "usage"
            )
        if counted != sent:
            raise ServerError(
                f"server {self.url} scored {counted} prompt tokens where {sent} were sent (did it add a BOS or other "
                "token?) and echoes no token ids to tell which: refusing rather than guessing"
            )

    # --- HTTP -------------------------------------------------------------------------------------------------------

    def _call(self, method: str, path: str, payload: dict[str, Any] | None) -> Any:
        headers = {"Content-Type": "application/json"}
        if os.environ.get(API_KEY_ENV):
            headers["Authorization"] = f"Bearer {os.environ[API_KEY_ENV]}"
        data = None if payload is None else json.dumps(payload).encode()
        request = urllib.request.Request(self.url + path, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            detail = _error_detail(exc)
            if exc.code == 429 or exc.code >= 500:
                raise ServerUnavailable(f"server {self.url}: HTTP {exc.code}{detail}") from None
            kind = ServerRefused if exc.code in (400, 422) else ServerError
            raise kind(f"server {self.url}: HTTP {exc.code} for {path}{detail}") from None
        except (http.client.HTTPException, OSError) as exc:  # refused, reset, dropped mid-answer, timed out
            reason = getattr(exc, "reason", None) or exc
            if isinstance(reason, (socket.timeout, TimeoutError)):
                raise ServerTimeout(f"server {self.url}: no answer within {self.timeout_s:g} s") from None
            raise ServerUnavailable(f"server {self.url}: {reason or type(exc).__name__}") from None
        try:
            return json.loads(raw)
        except ValueError:
            raise ServerError(f"server {self.url}: {path} answered with something that is not JSON") from None


def backoff_s(failures: int) -> float:
    """Wait after the n-th failure in a row: 0.5 s, 1 s, 2 s, ... at most 8 s, with ±20% jitter."""
    return min(MAX_BACKOFF_S, BACKOFF_S * 2 ** (failures - 1)) * random.uniform(0.8, 1.2)


def call_with_retries(call: Callable[[], T], retries: int) -> T:
    """One call to one server, retried on transient failures; still failing after `retries` retries: ServerError."""
    failures = 0
    while True:
        try:
            return call()
        except ServerUnavailable as exc:
            failures += 1
            if failures > retries:
                raise ServerError(f"{exc} (after {failures} tries)") from None
            time.sleep(backoff_s(failures))


def _token_id(token: Any) -> int | None:
    if isinstance(token, str) and token.startswith(TOKEN_ID_PREFIX) and token[len(TOKEN_ID_PREFIX):].isdigit():
        return int(token[len(TOKEN_ID_PREFIX):])
    return None


def _optional(value: Any, kind: type) -> Any:
    return value if isinstance(value, kind) and not isinstance(value, bool) else None


def _error_detail(exc: urllib.error.HTTPError) -> str:
    try:
        text = exc.read().decode(errors="replace").strip()
    except Exception:  # the body itself may be cut off
        return ""
    try:
        body = json.loads(text)
        message = body.get("error", {}).get("message") if isinstance(body.get("error"), dict) else body.get("message")
        text = str(message or text)
    except (ValueError, AttributeError):
        pass
    return f": {text.splitlines()[0][:300]}" if text else ""
