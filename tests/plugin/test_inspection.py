"""--show-prompts and --list-tasks: the collected tasks, rendered or listed, with no model."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from tests.fixtures.bangla_data import BANGLA_TASKS, write_bangla_fixtures
from tests.fixtures.shipped_suites import copy_suite

SHIPPED_SUITES = ("bias", "arc_mt", "bangla")

ROWS = [{"q": "two plus two?", "options": ["3", "4"], "answer": 1}, {"q": "sky colour?", "options": ["blue", "red"], "answer": 0}]


def write_local_task(folder: Path, task: str, data_file: str = "rows.jsonl", **keys: str) -> None:
    body = {
        "task": task, "dataset_path": "json", "test_split": "train", "output_type": "multiple_choice", "doc_to_text": "Q: {{q}}\\nA:",
        "doc_to_choice": "{{options}}", "doc_to_target": "answer", **keys,
    }
    lines = [f"{key}: \"{value}\"" if key.startswith("doc_to") else f"{key}: {value}" for key, value in body.items()]
    lines.append(f"dataset_kwargs:\n  data_files:\n    train: {data_file}")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{task}.yaml").write_text("\n".join(lines) + "\n")


def test_preview_of_every_shipped_suite_needs_no_model(pytester, data_mirror, shared_data):
    for suite in SHIPPED_SUITES:
        copy_suite(suite, pytester.path / "suites" / suite)
    pytester.makeini("[pytest]\nmodelbench_suites = suites\n")
    # The model named does not exist, and no scorer may be imported: the preview never loads a model.
    pytester.makeconftest(
        "import sys\n"
        "def pytest_sessionfinish(session):\n"
        "    assert not {'pytest_modelbench.scoring.causal', 'pytest_modelbench.scoring.masked'} & set(sys.modules)\n"
    )
    data = pytester.path / "data"
    data.mkdir()
    for hub_org in data_mirror.iterdir():
        (data / hub_org.name).symlink_to(hub_org)
    write_bangla_fixtures(data)  # Bangla has no offline copy
    result = pytester.runpytest_subprocess(
        "suites", "--show-prompts", "--limit=2", f"--data-dir={data}", "--model=no/such-model"
    )
    output = result.stdout.str()
    assert result.ret == 0, output
    for task in ["crows_pairs_english", "stereoset_intrasentence", "arc_challenge_mt_fi", *BANGLA_TASKS]:
        assert f"{task} (" in output, task
    assert "FAILED" not in output

    arc = [json.loads(line) for line in (shared_data / "arc_challenge_hf" / "test.jsonl").open()][1]
    gold = arc["choices"]["label"].index(arc["answerKey"])
    result.stdout.fnmatch_lines([
        "arc_challenge_mt_fi (arc_challenge_mt_fi.yaml): split 'test', 0-shot, first 2 documents",
        "*document 0",
        "*document 1",
        "    context:",
        f"      | Question: {arc['question']}",
        "      | Answer:",
        "    continuations:",
        f"      {gold}: {' ' + arc['choices']['text'][gold]!r}  <- gold",
    ])
    with (shared_data / "crows_pairs" / "crows_pairs_anonymized.csv").open(newline="") as handle:
        crows = next(csv.DictReader(handle))
    result.stdout.fnmatch_lines([
        "crows_pairs_english (*",
        f"  document 0, category {crows['bias_type']}",
        "      (empty: each continuation is scored on its own)",
        f"      0: {crows['sent_more']!r}  <- more stereotypical",
        f"      1: {crows['sent_less']!r}  <- less stereotypical",
    ])
    result.stdout.fnmatch_lines(["stereoset_intrasentence (*", "*0: *  <- stereotype", "*1: *  <- anti-stereotype",
                                 "*2: *  <- unrelated"])


def test_list_and_preview_name_each_task_that_cannot_render(pytester):
    suite = pytester.path / "suites" / "local"
    suite.mkdir(parents=True)
    (suite / "rows.jsonl").write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    write_local_task(suite, "renders", tag="[probe]")
    write_local_task(suite, "bad_field", doc_to_text="Q: {{question}}")
    write_local_task(suite, "no_data", data_file="missing.jsonl", num_fewshot=3, fewshot_config="{sampler: first_n}",
                     metric_list="[{metric: acc}]")
    baseline = pytester.path / "baselines" / "nightly" / "local" / "renders.json"
    baseline.parent.mkdir(parents=True)
    baseline.write_text("{}")
    pytester.makeini("[pytest]\nmodelbench_suites = suites\n")
    result = pytester.runpytest("suites", "--list-tasks", "--show-prompts", "--limit=1", "--baseline-name=nightly")
    assert result.ret == 1
    result.stdout.fnmatch_lines([
        "*modelbench tasks (baseline 'nightly' in baselines/nightly)*",
        "task * tag * dataset * split * metrics * few-shot * baseline",
        "local/bad_field * - * json * train * acc, acc_norm * 0 * no",
        "local/no_data * - * json * train * acc * 3 from 'train' (first_n) * no",
        "local/renders * probe * json * train * acc, acc_norm * 0 * yes",
        "*modelbench prompt preview*",
        "FAILED bad_field: DocumentError: *bad_field.yaml: task 'bad_field', document 0*question*",
        "FAILED no_data: DatasetError: *no_data.yaml: task 'no_data': cannot load split 'train'*",
        "renders (renders.yaml): split 'train', 0-shot, first 1 document",
        "      | Q: two plus two?",
        "      | A:",
        "      1: ' 4'  <- gold",
        "2 of 3 tasks cannot render their prompts",
    ])


def test_preview_stops_on_a_broken_yaml_with_the_collection_error(pytester):
    suite = pytester.path / "suites" / "local"
    write_local_task(suite, "typo", doc_to_txt="Q")
    pytester.makeini("[pytest]\nmodelbench_suites = suites\n")
    result = pytester.runpytest("suites", "--show-prompts")
    assert result.ret == 2
    result.stdout.fnmatch_lines(["*typo.yaml: unknown key 'doc_to_txt'*"])
    assert "modelbench prompt preview" not in result.stdout.str()


def test_inspection_refuses_xdist(pytester):
    result = pytester.runpytest("--list-tasks", "-n", "2")
    assert result.ret == 4
    result.stderr.fnmatch_lines(["*--show-prompts and --list-tasks run in one process: leave out -n*"])


def test_hub_dataset_offline_without_a_local_copy_says_what_it_needs(pytester, monkeypatch):
    """A clone without ../shared and without the hub: the error names both ways to get the data."""
    copy_suite("bias", pytester.path / "suites" / "bias")
    pytester.makeini("[pytest]\nmodelbench_suites = suites\n")
    monkeypatch.setenv("HF_HOME", str(pytester.path / "hf-home"))  # no datasets cache to fall back on
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    missing = pytester.path / "no-such-mirror"
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--show-prompts", f"--data-dir={missing}",
                                           "suites/bias/crows_pairs_english.yaml")
    assert result.ret == 1
    result.stdout.fnmatch_lines([
        "FAILED crows_pairs_english: DatasetError: *crows_pairs_english.yaml: task 'crows_pairs_english': cannot load "
        "split 'test' of dataset 'jannalu/crows_pairs_multilingual' from the Hugging Face Hub: *. It needs the hub "
        "(network access, with HF_HUB_OFFLINE and HF_DATASETS_OFFLINE unset) or a local copy: --data-dir DIR (or "
        "$MODELBENCH_DATA_DIR) holding DIR/jannalu/crows_pairs_multilingual/english/test.<jsonl|json|csv|tsv|parquet>; "
        f"--data-dir {missing} does not exist",
    ])
