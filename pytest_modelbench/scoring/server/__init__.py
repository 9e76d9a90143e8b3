"""Scoring through OpenAI-compatible `/v1/completions` servers that echo the prompt's log-probabilities: vLLM (its
echoed token ids are checked against those sent) and others whose answers can be checked by count (SGLang's form:
token text with `usage.prompt_tokens`); see client.py.

- client.py: one server, one request: retries, timeouts, and the checks every response must pass.
- pool.py: several servers, a bounded number of requests in flight, work moving off a server that fails.
- identity.py: what model a server serves, probed, so cached scores are never reused for other weights.
- scorer.py: the backend (scoring/backend.py): requests tokenized as the local path does, sent as token ids.
- export_model.py: a checkpoint (the packaged GGUF default included) written as a folder vLLM can serve.
"""
