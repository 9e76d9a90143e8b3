"""Few-shot sampling and (context, continuation) construction, following lm-eval 0.4.13's rules."""

from __future__ import annotations

import json
import random
import textwrap

import pytest

from pytest_modelbench.errors import DocumentError, TaskConfigError
from pytest_modelbench.tasks.config import load_task_config
from pytest_modelbench.tasks.requests import FewshotSampler
from pytest_modelbench.tasks.task import prepare_task


def make_task(tmp_path, extra="", splits=None, n_test=4):
    splits = splits or {
        "train": [{"q": f"T{i}?", "choices": ["x", f"t{i}"], "label": 1} for i in range(8)],
        "test": [{"q": f"Q{i}?", "choices": [f"a{i}", "b"], "label": 0} for i in range(n_test)],
    }
    files = {}
    for split, rows in splits.items():
        path = tmp_path / f"{split}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        files[split] = path.name
    yaml = textwrap.dedent(f"""
        task: toy
        dataset_path: json
        dataset_kwargs:
          data_files: {json.dumps(files)}
        training_split: train
        test_split: test
        output_type: multiple_choice
        doc_to_text: "Question: {{{{q}}}}\\nAnswer:"
        doc_to_target: label
        doc_to_choice: choices
        """) + textwrap.dedent(extra)
    path = tmp_path / "toy.yaml"
    path.write_text(yaml, encoding="utf-8")
    return load_task_config(path), splits


def test_zero_shot_context_and_continuations(tmp_path):
    config, _ = make_task(tmp_path)
    doc = prepare_task(config).documents[0]
    assert doc.context == "Question: Q0?\nAnswer:"
    assert doc.continuations == (" a0", " b")
    assert doc.gold == 0


def test_default_sampler_draws_from_one_seeded_generator_in_document_order(tmp_path):
    config, splits = make_task(tmp_path, 'description: "Desc about {{q}}\\n\\n"\n')
    documents = prepare_task(config, num_fewshot=2).documents
    rnd = random.Random(1234)  # lm-eval: one Random(1234) per task, rnd.sample(pool, n) per document
    for doc, row in zip(documents, splits["test"]):
        shots = rnd.sample(splits["train"], 2)
        expected = f"Desc about {row['q']}\n\n" + "".join(
            f"Question: {s['q']}\nAnswer: {s['choices'][s['label']]}\n\n" for s in shots
        ) + f"Question: {row['q']}\nAnswer:"
        assert doc.context == expected


def test_limit_keeps_the_shots_of_the_first_documents(tmp_path):
    config, _ = make_task(tmp_path)
    full = prepare_task(config, num_fewshot=3).documents
    limited = prepare_task(config, num_fewshot=3, limit=2).documents
    assert [d.context for d in limited] == [d.context for d in full[:2]]


def test_first_n_takes_the_head_of_the_pool(tmp_path):
    config, splits = make_task(tmp_path, "fewshot_split: train\nfewshot_config:\n  sampler: first_n\n")
    for doc in prepare_task(config, num_fewshot=2).documents:
        assert doc.context.startswith("Question: T0?\nAnswer: t0\n\nQuestion: T1?\nAnswer: t1\n\n")


def test_eval_doc_excluded_only_when_fewshot_split_is_test_split():
    pool = [{"q": i} for i in range(3)]
    same = FewshotSampler(pool, "first_n", exclude_eval_doc=True)
    assert same.shots(pool[0], 2) == [pool[1], pool[2]]
    other = FewshotSampler(pool, "first_n", exclude_eval_doc=False)
    assert other.shots(pool[0], 2) == [pool[0], pool[1]]


def test_yaml_num_fewshot_zero_wins_over_cli(tmp_path):
    config, _ = make_task(tmp_path, "num_fewshot: 0\n")
    assert prepare_task(config, num_fewshot=3).num_fewshot == 0


def test_string_target_is_looked_up_and_missing_target_is_named(tmp_path):
    splits = {"test": [{"q": "Q?", "choices": ["yes", "no"], "label": "no"},
                       {"q": "R?", "choices": ["yes", "no"], "label": "maybe"}]}
    config, _ = make_task(tmp_path, splits=splits)
    with pytest.raises(DocumentError, match=r"toy\.yaml: task 'toy', document 1: target 'maybe' is not among"):
        prepare_task(config)
    assert prepare_task(config, limit=1).documents[0].gold == 1


def test_target_index_out_of_range(tmp_path):
    splits = {"test": [{"q": "Q?", "choices": ["yes", "no"], "label": 5}]}
    config, _ = make_task(tmp_path, splits=splits)
    with pytest.raises(DocumentError, match="document 0: target index 5 is out of range"):
        prepare_task(config)


def test_empty_target_delimiter_and_description_glued_on(tmp_path):
    # bangla YAMLs: a description with no trailing newline runs straight into the first shot.
    config, _ = make_task(tmp_path, 'description: "Intro"\ntarget_delimiter: ""\n')
    doc = prepare_task(config).documents[0]
    assert doc.context == "IntroQuestion: Q0?\nAnswer:"
    assert doc.continuations == ("a0", "b")


def test_default_sampler_redraws_when_the_pool_holds_copies_of_the_eval_doc():
    doc = {"q": 0}
    pool = [doc, dict(doc), {"q": 1}, {"q": 2}]
    sampler = FewshotSampler(pool, "default", exclude_eval_doc=True)
    for _ in range(20):
        shots = sampler.shots(doc, 2)
        assert len(shots) == 2 and doc not in shots


def test_too_few_fewshot_documents_is_a_clear_error(tmp_path):
    from pytest_modelbench.errors import TaskConfigError

    config, _ = make_task(tmp_path)
    with pytest.raises(TaskConfigError, match="asks for 9 few-shot examples but split 'train' has only 8 documents"):
        prepare_task(config, num_fewshot=9)


INLINE_SAMPLES = """
fewshot_config:
  sampler: first_n
  samples:
    - {q: "S0?", choices: [nah, yep], label: 1}
    - {q: "S1?", choices: [nah, yep], label: 0}
    - {q: "S2?", choices: [nah, yep], label: 1}
"""


def test_inline_samples_are_the_pool_before_the_training_split(tmp_path):
    config, _ = make_task(tmp_path, INLINE_SAMPLES)
    doc = prepare_task(config, num_fewshot=2).documents[0]
    assert doc.context == "Question: S0?\nAnswer: yep\n\nQuestion: S1?\nAnswer: nah\n\nQuestion: Q0?\nAnswer:"


def test_inline_samples_drawn_with_the_seeded_generator(tmp_path):
    config, _ = make_task(tmp_path, INLINE_SAMPLES.replace("sampler: first_n", "sampler: default"))
    documents = prepare_task(config, num_fewshot=1).documents
    samples = [{"q": "S0?", "choices": ["nah", "yep"], "label": 1}, {"q": "S1?", "choices": ["nah", "yep"], "label": 0},
               {"q": "S2?", "choices": ["nah", "yep"], "label": 1}]
    rnd = random.Random(1234)
    for doc in documents:
        [shot] = rnd.sample(samples, 1)
        assert doc.context.startswith(f"Question: {shot['q']}\nAnswer: {shot['choices'][shot['label']]}\n\n")


def test_a_named_fewshot_split_wins_over_inline_samples(tmp_path):
    config, _ = make_task(tmp_path, "fewshot_split: train\n" + INLINE_SAMPLES)
    doc = prepare_task(config, num_fewshot=1).documents[0]
    assert doc.context.startswith("Question: T0?\nAnswer: t0\n\n")


def test_inline_samples_too_few_or_malformed_are_named(tmp_path):
    config, _ = make_task(tmp_path, INLINE_SAMPLES)
    with pytest.raises(TaskConfigError, match="asks for 4 few-shot examples but fewshot_config.samples has only 3"):
        prepare_task(config, num_fewshot=4)
    with pytest.raises(TaskConfigError, match="'fewshot_config.samples' must be a non-empty list of documents"):
        make_task(tmp_path, "fewshot_config:\n  samples: [1, 2]\n")


def test_samples_function_needs_permission_and_is_called(tmp_path):
    (tmp_path / "shots.py").write_text(
        "def make():\n    return [{'q': 'F0?', 'choices': ['nah', 'yep'], 'label': 0}]\n", encoding="utf-8")
    extra = "fewshot_config:\n  samples: !function shots.make\n"
    with pytest.raises(TaskConfigError, match="fewshot_config.samples.*--allow-task-code"):
        make_task(tmp_path, extra)  # the task file stays written
    config = load_task_config(tmp_path / "toy.yaml", allow_task_code=True)
    doc = prepare_task(config, num_fewshot=1).documents[0]
    assert doc.context == "Question: F0?\nAnswer: nah\n\nQuestion: Q0?\nAnswer:"


def test_no_test_split_and_no_fewshot_split_draws_one_extra_shot_as_lm_eval_does(tmp_path):
    # lm-eval passes the evaluated document to the sampler when fewshot split == test split, None == None included.
    splits = {"train": [{"q": f"T{i}?", "choices": ["x", f"t{i}"], "label": 1} for i in range(8)],
              "validation": [{"q": f"Q{i}?", "choices": [f"a{i}", "b"], "label": 0} for i in range(3)]}
    make_task(tmp_path, splits=splits)
    text = (tmp_path / "toy.yaml").read_text(encoding="utf-8").replace("test_split: test", "validation_split: validation")
    (tmp_path / "toy.yaml").write_text(text, encoding="utf-8")
    config = load_task_config(tmp_path / "toy.yaml")
    rnd = random.Random(1234)
    for doc, row in zip(prepare_task(config, num_fewshot=2).documents, splits["validation"]):
        shots = [s for s in rnd.sample(splits["train"], 3) if s != row][:2]
        assert doc.context.startswith("".join(f"Question: {s['q']}\nAnswer: t{s['q'][1]}\n\n" for s in shots))


def test_modelbench_limit_caps_the_documents_and_a_smaller_limit_wins(tmp_path):
    config, _ = make_task(tmp_path, "modelbench:\n  limit: 2\n")
    assert [len(prepare_task(config, limit=n).documents) for n in (None, 1, 3)] == [2, 1, 2]
    assert prepare_task(config).limit == 2  # recorded in the baseline provenance like --limit
