"""pytest runs scored on a server (`--server-url`, tests/fixtures/openai_server.py over the tiny model): the same
numbers and baseline as a local run; a server killed mid-run leaves the rest of the task unscored: the task is in
`error` (the run, not the model; exit status 7) with the server named, no baseline is written, and the re-run after
a restart completes, reusing the scores cached before the kill."""

from __future__ import annotations

import json
import shutil
import signal
from pathlib import Path

import pytest

from pytest_modelbench.gate.decision import EXIT_STATUS_INTEGRITY
from pytest_modelbench.scoring.server.identity import PROBE_TEXTS
from tests.fixtures.gate_tasks import pool_documents, write_task
from tests.fixtures.server_process import start_server
from tests.plugin.test_faults import cache_rows, scores_cached_yet, start_pytest, wait_for

REPO = Path(__file__).resolve().parents[2]
REQUESTS = 800  # the killed run's task: 400 two-choice documents


def loglikelihoods(pytester, tiny_model, data_mirror, out: Path, *args) -> list[float]:
    result = pytester.runpytest(
        f"--model={tiny_model}", f"--data-dir={data_mirror}", "--limit=6", "--no-cache", "arc_mt", "-k", "fi",
        f"--results-json={out}", "--log-samples", "--snapshot-update", *args,
    )
    result.assert_outcomes(passed=1)
    samples = json.loads(out.read_text())["samples"]["arc_mt/arc_challenge_mt_fi"]
    return [value for sample in samples for value in sample["loglikelihoods"]]


def test_a_server_run_scores_as_the_local_run(pytester, tiny_model, data_mirror):
    shutil.copytree(REPO / "suites" / "arc_mt", pytester.path / "arc_mt")
    local = loglikelihoods(pytester, tiny_model, data_mirror, pytester.path / "local.json")
    # the tiny model's window is 256 tokens, cut as lm-eval cuts it: a server keeping 257 prompt tokens scores the same
    server = start_server(tiny_model, "org/ckpt", max_model_len=258)
    try:
        remote = loglikelihoods(pytester, tiny_model, data_mirror, pytester.path / "server.json",
                                f"--server-url={server.url}", "--batch-size=4", "--baseline-name=served")
    finally:
        server.kill()
    assert len(remote) == len(local) == 24
    assert remote == pytest.approx(local, rel=1e-6, abs=1e-5)
    baseline = json.loads(next((pytester.path / "baselines" / "served").rglob("arc_challenge_mt_fi.json")).read_text())
    provenance = baseline["provenance"]
    assert provenance["model_fingerprint"].startswith("server:org/ckpt@probe:")
    assert provenance["device"].startswith(f"server {server.url} (serving org/ckpt")


@pytest.mark.parametrize(("option", "value", "message"), [
    ("--server-url", "node:8000", "--server-url must be an http(s) URL"),
    ("--server-concurrency", "0", "--server-concurrency must be a positive integer"),
    ("--server-timeout", "-1", "--server-timeout must be a positive number of seconds"),
    ("--server-retries", "-1", "--server-retries must be an integer >= 0"),
])
def test_bad_server_options_are_usage_errors(pytester, option, value, message):
    result = pytester.runpytest(f"{option}={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{message}*"])


def test_a_killed_server_leaves_the_task_in_error_writes_no_baseline_and_the_rerun_reuses_the_cache(
        pytester, tiny_model, monkeypatch):
    documents = pool_documents(REQUESTS // 2, seed=3)
    assert len({(d["text"], option) for d in documents for option in d["options"]}) == REQUESTS  # no repeats
    write_task(pytester.path / "suites" / "probe", "served_probe", documents)
    pytester.makeini("[pytest]\nmodelbench_suites = suites\n")
    monkeypatch.setenv("MODELBENCH_CACHE_DIR", str(pytester.path / "cache"))
    monkeypatch.setenv("MODELBENCH_PROGRESS_INTERVAL", "0")
    server = start_server(tiny_model, "org/ckpt", fault="slow")  # so that the kill comes before the task's end
    port = server.port
    args = (f"--server-url={server.url}", "--server-retries=1", "--server-concurrency=1", "--snapshot-update")
    process = start_pytest(pytester.path, tiny_model, *args)
    try:
        # the cache is flushed every few seconds: kill once some scores are in it and the task is not done
        wait_for(lambda: scores_cached_yet(pytester.path), process)
        server.kill()
        output = process.communicate(timeout=120)[0]
    finally:
        server.kill()
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
    assert process.returncode == EXIT_STATUS_INTEGRITY, output
    assert "error (the run, not the model): task 'probe/served_probe'" in output
    assert f"no scoring server could answer: server {server.url}" in output
    assert "Traceback" not in output
    assert not (pytester.path / "baselines").exists() or not any((pytester.path / "baselines").rglob("*.json"))
    cached = cache_rows(pytester.path)
    assert 0 < cached < REQUESTS

    restarted = start_server(tiny_model, "org/ckpt", port=port)
    try:
        rerun = start_pytest(pytester.path, tiny_model, *args)
        rerun_output = rerun.communicate(timeout=600)[0]
        scored_after_restart = restarted.stats()["prompts"]
    finally:
        restarted.kill()
    assert rerun.returncode == 0, rerun_output
    assert any((pytester.path / "baselines").rglob("served_probe.json"))
    assert scored_after_restart == REQUESTS - cached + len(PROBE_TEXTS)  # only what the cache did not have


def test_two_xdist_workers_share_one_server(pytester, tiny_model, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("MODELBENCH_CACHE_DIR", str(pytester.path / "cache"))
    tasks = [f"shared_server_{i}" for i in range(4)]
    for i, task in enumerate(tasks):
        write_task(pytester.path / "suites" / "probe", task, pool_documents(25, seed=10 + i))
    pytester.makeini("[pytest]\nmodelbench_suites = suites\n")
    server = start_server(tiny_model, "org/ckpt")
    try:
        result = pytester.runpytest(f"--model={tiny_model}", f"--server-url={server.url}", "-n", "2",
                                    "--snapshot-update", "-p", "no:cacheprovider")
        prompts = server.stats()["prompts"]
    finally:
        server.kill()
    result.assert_outcomes(passed=4)
    baselines = sorted(p.stem for p in (pytester.path / "baselines").rglob("*.json"))
    assert baselines == ["gate-policy", *tasks]  # the controller records the policy the workers computed
    # every request scored once (the workers share the score cache too), plus one identity probe per worker that ran
    assert prompts - 4 * 50 in (len(PROBE_TEXTS), 2 * len(PROBE_TEXTS))


@pytest.mark.parametrize(("args", "message"), [
    (("--model-type=masked",), "--model-type masked cannot be scored on a server"),
    (("--model-args=device_map=auto",), "--model-args device_map applies to a model loaded here, not to one on a "
                                        "server (--server-url)"),
])
def test_options_that_need_a_local_model_are_named_errors(pytester, tiny_model, args, message):
    write_task(pytester.path / "suites" / "probe", "local_only", pool_documents(2))
    pytester.makeini("[pytest]\nmodelbench_suites = suites\n")
    result = pytester.runpytest(f"--model={tiny_model}", "--server-url=http://127.0.0.1:9/v1", "--score-only",
                                *args)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"*{message}*"])
    assert "Traceback" not in result.stdout.str()


CHAT_TEMPLATE = ("{% for m in messages %}<|bos|>{{ m['role'] }}\n{{ m['content'] }}<|endoftext|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|bos|>assistant\n{% endif %}")
SERVED_SUITE = {
    "gen_served.yaml": """
        task: gen_served
        dataset_path: json
        dataset_kwargs:
          data_files: {test: data.jsonl}
        test_split: test
        output_type: generate_until
        doc_to_text: "{{prompt}}"
        doc_to_target: answer
        generation_kwargs:
          until: ["\\n", "০"]
          max_gen_toks: 5
        """,
    "ppl_served.yaml": """
        task: ppl_served
        dataset_path: json
        dataset_kwargs:
          data_files: {test: data.jsonl}
        test_split: test
        output_type: loglikelihood_rolling
        doc_to_target: "{{prompt}} {{answer}}"
        metric_list:
          - metric: word_perplexity
          - metric: bits_per_byte
        """,
}


def test_generative_and_rolling_tasks_under_a_chat_template_score_and_gate_on_a_server_as_locally(
        pytester, tiny_model, tmp_path):
    """The chat template is applied here, so the served prompts are the local ones; a baseline recorded locally
    gates the served run (pass), with the same generations and rolling log-likelihoods."""
    import textwrap

    from transformers import AutoTokenizer

    chat_model = tmp_path / "chat_model"
    shutil.copytree(tiny_model, chat_model)
    tokenizer = AutoTokenizer.from_pretrained(chat_model)
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(chat_model)
    suite = pytester.path / "suites" / "served"
    suite.mkdir(parents=True)
    rows = [{"prompt": f"{word} {n}", "answer": "x"} for word in ("Question:", "The quick", "He couldn't", "প্রশ্ন:")
            for n in range(3)]
    (suite / "data.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                                      encoding="utf-8")
    for name, text in SERVED_SUITE.items():
        (suite / name).write_text(textwrap.dedent(text), encoding="utf-8")
    pytester.makeini("[pytest]\nmodelbench_suites = suites\n")

    def run(out: Path, *args):
        result = pytester.runpytest(f"--model={chat_model}", "--apply-chat-template", "--no-cache", "-p",
                                    "no:cacheprovider", f"--results-json={out}", "--log-samples", *args)
        result.assert_outcomes(passed=2)
        assert "Traceback" not in result.stdout.str()
        return json.loads(out.read_text())["samples"]

    local = run(pytester.path / "local.json", "--snapshot-update")
    server = start_server(tiny_model, "org/ckpt", max_model_len=258)  # the local window: 256 tokens
    try:
        served = run(pytester.path / "served.json", f"--server-url={server.url}")
        generated = server.stats()["generations"]
    finally:
        server.kill()
    gen, ppl = local["served/gen_served"], local["served/ppl_served"]
    assert all(s["context"].startswith("<|bos|>user\n") for s in gen)  # the template was applied
    assert [s["context"] for s in served["served/gen_served"]] == [s["context"] for s in gen]
    assert [s["generation"] for s in served["served/gen_served"]] == [s["generation"] for s in gen]
    assert len({s["generation"] for s in gen}) > 1
    assert generated == len(rows) + len(PROBE_TEXTS)  # every document generated on the server, and the probe
    assert [s["loglikelihoods"][0] for s in served["served/ppl_served"]] == pytest.approx(
        [s["loglikelihoods"][0] for s in ppl], abs=1e-4)


def test_a_server_stopped_mid_run_ends_every_task_in_error_within_about_one_timeout(pytester, tiny_model, monkeypatch):
    """Issue 50: SIGSTOP (the process hangs: the kernel still accepts connections, nothing answers) in the middle of
    the second of three tasks, --server-timeout 2 s and the default retries and concurrency: the second task is
    `error` about one timeout later, the third at once (the server was given up for the session), exit 7, the server
    named; the first task's baseline is written."""
    import time

    tasks = ("stopped_a", "stopped_b", "stopped_c")
    for i, task in enumerate(tasks):
        write_task(pytester.path / "suites" / "probe", task, pool_documents(REQUESTS // 2, seed=10 + i))
    pytester.makeini("[pytest]\nmodelbench_suites = suites\n")
    (pytester.path / "conftest.py").write_text("import pathlib\n\n\ndef pytest_runtest_logstart(nodeid, location):\n"
                                               "    if nodeid.endswith('stopped_b'):\n"
                                               "        pathlib.Path('second_started').touch()\n")
    monkeypatch.setenv("MODELBENCH_CACHE_DIR", str(pytester.path / "cache"))
    server = start_server(tiny_model, "org/ckpt", fault="slow")
    process = start_pytest(pytester.path, tiny_model, f"--server-url={server.url}", "--server-timeout=2",
                           "--results-json=r.json", "--snapshot-update")
    try:
        wait_for(lambda: (pytester.path / "second_started").exists(), process)
        time.sleep(0.5)
        server.process.send_signal(signal.SIGSTOP)
        stopped = time.monotonic()
        output = process.communicate(timeout=120)[0]
        waited = time.monotonic() - stopped
    finally:
        server.process.send_signal(signal.SIGCONT)
        server.kill()
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
    assert process.returncode == EXIT_STATUS_INTEGRITY, output
    gate = json.loads((pytester.path / "r.json").read_text())["gate"]
    assert {task: outcome["status"] for task, outcome in gate.items()} == {
        "probe/stopped_a": "created", "probe/stopped_b": "error", "probe/stopped_c": "error"}
    assert f"server {server.url}: no answer within 2 s" in output
    assert "given up for the rest of this session after 5 timeouts in a row" in output
    assert waited < 15, waited  # about one 2-s timeout; five per task and the backoffs took 35 s for two tasks
