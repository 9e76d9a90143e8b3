"""The baseline gate on a generate_until task (exact match per filter pipeline, paired per document: McNemar), on a
loglikelihood_rolling task (perplexities: paired bootstrap re-applying lm-eval's weighted aggregates) and on a
loglikelihood task (acc: McNemar on the greedy flags; perplexity: paired bootstrap re-applying exp(-mean))."""

from __future__ import annotations

import json
import textwrap

import pytest
import transformers

from tests.plugin.gate_project import _one_torch_thread, bad_model, gate_entries, run_gate  # noqa: F401 - fixtures

TASK = "gen_probe"
PROMPTS = [f"{word} {n}" for word in ("Question", "The quick", "He couldn't", "Many people", "Kysymys") for n in
           range(8)]
YAML = """
task: gen_probe
dataset_path: json
dataset_kwargs:
  data_files: {test: data.jsonl}
test_split: test
output_type: generate_until
doc_to_text: "{{prompt}}"
doc_to_target: answer
generation_kwargs:
  until: []
  max_gen_toks: 3
filter_list:
  - name: raw
    filter:
      - function: take_first
  - name: lower
    filter:
      - function: lowercase
modelbench:
  category_field: kind
"""


def greedy_answers(model_path, prompts, new_tokens=3):
    from pytest_modelbench.scoring.loading import load_model, resolve_model_source
    from pytest_modelbench.tasks.generation_settings import GenerationSettings
    from tests.fixtures.generation import generate

    loaded = load_model(resolve_model_source(str(model_path)), dtype="float32")
    contexts = [loaded.tokenizer.encode(prompt) for prompt in prompts]
    return generate(loaded.model, loaded.tokenizer, contexts, GenerationSettings((), new_tokens), 8)


@pytest.fixture(scope="module")
def generation_docs(tiny_model, bad_model):
    """Each prompt's reference is tiny_model's own answer: categories by whether bad_model answers the same."""
    good, bad = greedy_answers(tiny_model, PROMPTS), greedy_answers(bad_model, PROMPTS)
    docs = [{"prompt": p, "answer": g, "kind": "agree" if g == b else "disagree"} for p, g, b in zip(PROMPTS, good, bad)]
    assert sum(d["kind"] == "disagree" for d in docs) >= 20  # enough for McNemar to see the drop
    return docs


def test_exact_match_drop_fails_the_gate_and_the_same_model_passes(pytester, tiny_model, bad_model, generation_docs):
    suite = pytester.path / "suites" / "gen"
    suite.mkdir(parents=True)
    (suite / "data.jsonl").write_text("".join(json.dumps(d) + "\n" for d in generation_docs), encoding="utf-8")
    (suite / f"{TASK}.yaml").write_text(textwrap.dedent(YAML), encoding="utf-8")
    pytester.makeini("[pytest]\nmodelbench_suites = suites\n")
    run_gate(pytester, tiny_model, "--snapshot-update").assert_outcomes(passed=1)
    run_gate(pytester, tiny_model, "--batch-size=4").assert_outcomes(passed=1)

    junit, results = pytester.path / "junit.xml", pytester.path / "results.json"
    result = run_gate(pytester, bad_model, f"--junitxml={junit}", f"--results-json={results}", "--log-samples")
    result.assert_outcomes(failed=1)
    entries = gate_entries(junit)[TASK]
    assert entries[("exact_match,raw", "disagree")] == "regressed"
    assert entries[("exact_match,lower", None)] == "regressed"
    if any(d["kind"] == "agree" for d in generation_docs):
        assert entries[("exact_match,raw", "agree")] == "pass"
    result.stdout.fnmatch_lines(["metric*category*n*baseline*candidate*delta*margin*p-value*MDE*verdict",
                                 "exact_match,raw*disagree*1.0000*0.0000*-1.0000*regressed"])
    samples = json.loads(results.read_text())["samples"][f"gen/{TASK}"]
    bad_answers = greedy_answers(bad_model, PROMPTS)
    assert [s["generation"] for s in samples] == bad_answers
    assert [s["filtered"]["lower"] for s in samples] == [answer.lower() for answer in bad_answers]


ROLLING_YAML = """
task: ppl_probe
dataset_path: json
dataset_kwargs:
  data_files: {test: data.jsonl}
test_split: test
output_type: loglikelihood_rolling
doc_to_target: text
"""


def test_perplexity_rise_fails_the_gate(pytester, tiny_model, bad_model):
    # Texts tiny_model writes itself (greedy): likely under it, unlikely under the other seed's weights.
    texts = [prompt + answer for prompt, answer in zip(PROMPTS, greedy_answers(tiny_model, PROMPTS, new_tokens=12))]
    suite = pytester.path / "suites" / "ppl"
    suite.mkdir(parents=True)
    (suite / "data.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    (suite / "ppl_probe.yaml").write_text(textwrap.dedent(ROLLING_YAML), encoding="utf-8")
    pytester.makeini("[pytest]\nmodelbench_suites = suites\n")
    run_gate(pytester, tiny_model, "--snapshot-update").assert_outcomes(passed=1)
    run_gate(pytester, tiny_model).assert_outcomes(passed=1)

    junit = pytester.path / "junit.xml"
    result = run_gate(pytester, bad_model, f"--junitxml={junit}")
    result.assert_outcomes(failed=1)
    entries = gate_entries(junit)["ppl_probe"]
    assert entries[("byte_perplexity", None)] == entries[("bits_per_byte", None)] == "regressed"
    # A random model's word perplexity is astronomically large: the bootstrap cannot bound it, which is not a pass.
    assert entries[("word_perplexity", None)] in ("regressed", "inconclusive")


LOGLIKELIHOOD_YAML = """
task: greedy_probe
dataset_path: json
dataset_kwargs:
  data_files: {test: data.jsonl}
test_split: test
output_type: loglikelihood
doc_to_text: prompt
doc_to_target: answer
"""


def test_greedy_continuations_lost_fail_the_gate(pytester, tiny_model, bad_model):
    # Each continuation is tiny_model's own greedy next token: under the other seed's weights few stay greedy (acc,
    # McNemar on the per-document flags) and the perplexity rises (paired bootstrap re-applying exp(-mean)). One token,
    # so that the perplexities stay small enough for the bootstrap to bound them.
    suite = pytester.path / "suites" / "greedy"
    suite.mkdir(parents=True)
    prompts = [f"{word} {n}" for word in ("Question", "The quick", "He couldn't", "Many people", "Kysymys")
               for n in range(40)]
    rows = [{"prompt": p, "answer": a} for p, a in zip(prompts, greedy_answers(tiny_model, prompts, new_tokens=1))]
    (suite / "data.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    (suite / "greedy_probe.yaml").write_text(textwrap.dedent(LOGLIKELIHOOD_YAML), encoding="utf-8")
    pytester.makeini("[pytest]\nmodelbench_suites = suites\n")
    run_gate(pytester, tiny_model, "--snapshot-update").assert_outcomes(passed=1)
    run_gate(pytester, tiny_model).assert_outcomes(passed=1)

    junit = pytester.path / "junit.xml"
    run_gate(pytester, bad_model, f"--junitxml={junit}").assert_outcomes(failed=1)
    entries = gate_entries(junit)["greedy_probe"]
    assert entries[("acc", None)] == entries[("perplexity", None)] == "regressed"


def test_chat_template_options_end_to_end_refusals(pytester, tiny_model):
    suite = pytester.path / "suites" / "gen"
    suite.mkdir(parents=True)
    (suite / "data.jsonl").write_text(json.dumps({"prompt": "Q", "answer": "x", "kind": "a"}) + "\n", encoding="utf-8")
    (suite / f"{TASK}.yaml").write_text(textwrap.dedent(YAML), encoding="utf-8")
    pytester.makeini("[pytest]\nmodelbench_suites = suites\n")
    result = run_gate(pytester, tiny_model, "--apply-chat-template", "--score-only")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*--apply-chat-template: the model's tokenizer has no chat template*"])
    result = run_gate(pytester, tiny_model, "--fewshot-as-multiturn=true")
    assert result.ret == 4  # usage error
    result.stderr.fnmatch_lines(["*--fewshot-as-multiturn true needs --apply-chat-template*"])


def refuse_to_generate(*args, **kwargs):
    raise AssertionError("the model generated although every answer was cached")


def test_a_sampled_tasks_draws_come_again_from_its_seed_and_the_cache_and_another_seed_is_another_draw(
        pytester, tiny_model, monkeypatch):
    """Issue 52: a sampled task with repeats draws each document 4 times; the same seed and batch size give the same
    draws again (generated or cached); another seed or batch size is another draw of the same task, gated against the
    same baseline (never 're-baseline required'), and the baseline's provenance says how it was sampled."""
    monkeypatch.setenv("MODELBENCH_CACHE_DIR", str(pytester.path / "cache"))
    suite = pytester.path / "suites" / "gen"
    suite.mkdir(parents=True)
    docs = [{"prompt": prompt, "answer": "x", "kind": "a"} for prompt in PROMPTS[:12]]
    (suite / "data.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    sampled = YAML.replace("  max_gen_toks: 3\n", "  max_gen_toks: 3\n  do_sample: true\n  temperature: 0.8\n")
    sampled += "repeats: 4\nmetric_list:\n  - metric: exact_match\n  - metric: pass@2\n"
    (suite / f"{TASK}.yaml").write_text(textwrap.dedent(sampled), encoding="utf-8")
    pytester.makeini("[pytest]\nmodelbench_suites = suites\n")
    runs = {run: pytester.path / f"{run}.json" for run in ("first", "again", "cached", "seed7", "batch2")}
    run_gate(pytester, tiny_model, "--snapshot-update", "--log-samples",
             f"--results-json={runs['first']}").assert_outcomes(passed=1)
    provenance = json.loads((pytester.path / "baselines" / "default" / "gen" / f"{TASK}.json").read_text())[
        "provenance"]
    assert provenance["scoring_protocol"] == ("causal-lm sampled generation (do_sample=True, temperature=0.8; 4 "
                                              "draw(s) a document), lm-eval 0.4.13 generate_until rules")
    assert provenance["sampling"] == "torch seed 1234 per task, batch size 1"
    run_gate(pytester, tiny_model, "--no-cache", "--log-samples", f"--results-json={runs['again']}").assert_outcomes(
        passed=1)
    for run, args in (("seed7", ["--sampling-seed=7"]), ("batch2", ["--batch-size=2"])):
        result = run_gate(pytester, tiny_model, "--log-samples", f"--results-json={runs[run]}", *args)
        result.assert_outcomes(passed=1)  # compared with the baseline, not "re-baseline required"
        gate = json.loads(runs[run].read_text())["gate"][f"gen/{TASK}"]
        assert gate["status"] == "pass" and {e["metric"] for e in gate["entries"]} >= {"pass@2,lower", "exact_match,raw"}

    monkeypatch.setattr(transformers.GenerationMixin, "generate", refuse_to_generate)
    run_gate(pytester, tiny_model, "--log-samples", f"--results-json={runs['cached']}").assert_outcomes(passed=1)
    draws = {run: [s["generation"] for s in json.loads(path.read_text())["samples"][f"gen/{TASK}"]]
             for run, path in runs.items()}
    assert all(len(document) == 4 for document in draws["first"])
    assert any(len(set(document)) > 1 for document in draws["first"])  # the draws of a document differ
    assert draws["first"] == draws["again"] == draws["cached"]
    assert draws["seed7"] != draws["first"] and draws["batch2"] != draws["first"]
    sample = json.loads(runs["first"].read_text())["samples"][f"gen/{TASK}"][0]
    assert sample["filtered_draws"]["lower"] == [draw.lower() for draw in sample["generation"]]
