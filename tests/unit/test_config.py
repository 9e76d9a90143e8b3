"""Task YAML loading: includes, tags, unknown keys, !function, errors that name the file and key."""

from __future__ import annotations

import textwrap

import pytest

from pytest_modelbench.errors import TaskConfigError
from pytest_modelbench.tasks.config import is_task_file, load_task_config
from pytest_modelbench.tasks.groups import load_group_config

BASE = """
tag: arc_challenge_mt
task: base_task
dataset_path: json
output_type: multiple_choice
test_split: test
doc_to_text: "Question: {{question}}\\nAnswer:"
doc_to_target: "{{label}}"
doc_to_choice: "{{choices}}"
metadata:
  version: 1.0
  note: base
"""


def write(folder, name, text):
    path = folder / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def test_include_is_shallow_and_local_keys_win(tmp_path):
    write(tmp_path, "_base_yaml", BASE)
    child = write(tmp_path, "child.yaml", "include: _base_yaml\ntask: child\nmetadata:\n  version: 2.0\n")
    config = load_task_config(child)
    assert config.task == "child"
    assert config.tag == ("arc_challenge_mt",)
    assert config.doc_to_text == "Question: {{question}}\nAnswer:"
    assert config.version == 2.0  # metadata replaced whole, not merged


def test_include_resolves_relative_to_including_file(tmp_path):
    (tmp_path / "common").mkdir()
    write(tmp_path / "common", "base.yaml", BASE)
    write(tmp_path / "common", "middle.yaml", "include: base.yaml\ntarget_delimiter: ''\n")
    child = write(tmp_path, "child.yaml", "include: common/middle.yaml\ntask: child\n")
    config = load_task_config(child)
    assert config.target_delimiter == ""
    assert config.dataset_path == "json"


def test_include_cycle_is_reported(tmp_path):
    write(tmp_path, "a.yaml", "include: b.yaml\ntask: a\n")
    write(tmp_path, "b.yaml", "include: a.yaml\n")
    with pytest.raises(TaskConfigError, match="include cycle"):
        load_task_config(tmp_path / "a.yaml")


def test_missing_include_names_file(tmp_path):
    path = write(tmp_path, "a.yaml", "include: nowhere.yaml\ntask: a\n")
    with pytest.raises(TaskConfigError, match=r"a\.yaml: include 'nowhere\.yaml' not found"):
        load_task_config(path)


def test_unknown_key_is_named(tmp_path):
    path = write(tmp_path, "t.yaml", BASE + "data_files: x.json\n")
    with pytest.raises(TaskConfigError, match=r"t\.yaml: unknown key 'data_files'"):
        load_task_config(path)


def test_malformed_yaml_names_file(tmp_path):
    path = write(tmp_path, "bad.yaml", "task: [unclosed\n")
    with pytest.raises(TaskConfigError, match=r"bad\.yaml: malformed YAML"):
        load_task_config(path)


def test_function_tag_refused_without_permission(tmp_path):
    write(tmp_path, "utils.py", "def choices(doc):\n    return ['a', 'b']\n")
    path = write(tmp_path, "t.yaml", BASE.replace('doc_to_choice: "{{choices}}"', "doc_to_choice: !function utils.choices"))
    with pytest.raises(TaskConfigError, match="--allow-task-code"):
        load_task_config(path)
    config = load_task_config(path, allow_task_code=True)
    assert config.doc_to_choice({"x": 1}) == ["a", "b"]


@pytest.mark.parametrize("module, problem", [
    ("import sys\nsys.exit('SWI-Prolog is required')\n", "SWI-Prolog is required"),  # as one of lm-eval's utils does
    ("import rouge_score_not_here\n", "No module named 'rouge_score_not_here' (for a task of lm-eval's tasks folder, "
                                      "pip install 'pytest-modelbench[lmeval-task-code]' installs"),
])
def test_task_code_that_fails_at_import_is_one_error_naming_the_key(tmp_path, module, problem):
    write(tmp_path, "utils.py", module + "def choices(doc):\n    return ['a', 'b']\n")
    path = write(tmp_path, "t.yaml", BASE.replace('doc_to_choice: "{{choices}}"', "doc_to_choice: !function utils.choices"))
    with pytest.raises(TaskConfigError, match=r"t.yaml: key 'doc_to_choice': cannot load utils.choices: ") as caught:
        load_task_config(path, allow_task_code=True)
    assert problem in str(caught.value)


def test_unsupported_output_type_and_lm_eval_keys(tmp_path):
    path = write(tmp_path, "g.yaml", BASE.replace("multiple_choice", "ranking"))
    with pytest.raises(TaskConfigError, match="key 'output_type': only multiple_choice, generate_until, "
                                              "loglikelihood_rolling, loglikelihood are supported, found 'ranking'"):
        load_task_config(path)
    path = write(tmp_path, "f.yaml", BASE + "filter_list: []\n")
    with pytest.raises(TaskConfigError, match="'filter_list' applies to generate_until tasks only"):
        load_task_config(path)
    path = write(tmp_path, "r.yaml", BASE + "use_prompt: x\n")
    with pytest.raises(TaskConfigError, match="'use_prompt' is not supported"):
        load_task_config(path)
    with pytest.raises(TaskConfigError, match="'gen_prefix' applies to generate_until tasks only"):
        load_task_config(write(tmp_path, "q.yaml", BASE + "gen_prefix: x\n"))
    with pytest.raises(TaskConfigError, match="'repeats' applies to generate_until tasks only"):
        load_task_config(write(tmp_path, "p.yaml", BASE + "repeats: 2\n"))


def test_a_task_without_output_type_generates_as_in_lm_eval(tmp_path):
    # lm-eval's TaskConfig default (fld/fld_default.yaml has no output_type); with doc_to_choice the target indexes
    # the choices, as in lm-eval's generate_until
    text = BASE.replace("output_type: multiple_choice\n", "")
    config = load_task_config(write(tmp_path, "d.yaml", text))
    assert (config.output_type, [m.name for m in config.metric_list]) == ("generate_until", ["exact_match"])
    assert config.generation is not None and [f.name for f in config.filters] == ["none"]


def test_generate_until_defaults_as_lm_eval(tmp_path):
    text = BASE.replace("multiple_choice", "generate_until").replace('doc_to_choice: "{{choices}}"\n', "")
    config = load_task_config(write(tmp_path, "g.yaml", text + 'fewshot_delimiter: "###"\n'))
    assert (config.output_type, config.generation.until, config.generation.max_gen_toks) == (
        "generate_until", ("###",), 256)
    assert [f.name for f in config.filters] == ["none"]
    assert [m.name for m in config.metric_list] == ["exact_match"]
    repeated = load_task_config(write(tmp_path, "r.yaml", text + "repeats: 5\ngeneration_kwargs: {max_new_tokens: 9}\n"))
    assert repeated.generation.max_gen_toks == 9  # lm-eval's alias; repeats add nothing under greedy decoding
    with pytest.raises(TaskConfigError, match="'repeats' must be a positive integer"):
        load_task_config(write(tmp_path, "z.yaml", text + "repeats: 0\n"))
    assert (repeated.repeats, repeated.draws) == (5, 1)  # greedy: one generation, copied to every repeat
    sampled = load_task_config(write(tmp_path, "s.yaml", text + "repeats: 3\ngeneration_kwargs: {temperature: 0.8}\n"))
    assert (sampled.repeats, sampled.draws, sampled.generation.sampling) == (3, 3, True)  # one generation per draw
    with pytest.raises(TaskConfigError, match="'generation_kwargs' applies to generate_until tasks only"):
        load_task_config(write(tmp_path, "m.yaml", BASE + "generation_kwargs: {until: [x]}\n"))


def test_modelbench_limit(tmp_path):
    assert load_task_config(write(tmp_path, "l.yaml", BASE + "modelbench:\n  limit: 5\n")).limit == 5
    with pytest.raises(TaskConfigError, match="'modelbench.limit' must be a positive integer"):
        load_task_config(write(tmp_path, "z.yaml", BASE + "modelbench:\n  limit: 0\n"))


def test_yaml_1_1_booleans_and_defaults(tmp_path):
    config = load_task_config(write(tmp_path, "t.yaml", BASE + "should_decontaminate: yes\n"))
    assert config.should_decontaminate is True
    assert config.target_delimiter == " " and config.fewshot_delimiter == "\n\n"
    assert [m.name for m in config.metric_list] == ["acc", "acc_norm"]
    assert config.fewshot_sampler == "default"


def test_fewshot_config_sampler_and_unknown_sampler(tmp_path):
    text = BASE + "fewshot_split: dev\nfewshot_config:\n  sampler: first_n\n"
    config = load_task_config(write(tmp_path, "t.yaml", text))
    assert (config.fewshot_sampler, config.fewshot_split) == ("first_n", "dev")
    with pytest.raises(TaskConfigError, match="unknown sampler 'shuffle'"):
        load_task_config(write(tmp_path, "u.yaml", text.replace("first_n", "shuffle")))


def test_config_hash_ignores_tags_but_not_templates(tmp_path):
    first = load_task_config(write(tmp_path, "a.yaml", BASE)).config_hash
    retagged = load_task_config(write(tmp_path, "b.yaml", BASE.replace("tag: arc_challenge_mt", "tag: other"))).config_hash
    edited = load_task_config(write(tmp_path, "c.yaml", BASE.replace("Answer:", "A:"))).config_hash
    assert first == retagged
    assert first != edited


def test_gate_block_with_margins_per_metric(tmp_path):
    gate = "modelbench:\n  gate:\n    alpha: 0.01\n    metrics:\n      acc_norm: {absolute_margin: 0.02}\n"
    config = load_task_config(write(tmp_path, "g.yaml", BASE + gate))
    assert config.gate.alpha == 0.01 and config.gate.metrics == {"acc_norm": {"absolute_margin": 0.02}}
    # margins are policy, not task definition: the config hash ignores them
    assert config.config_hash == load_task_config(write(tmp_path, "plain.yaml", BASE)).config_hash
    bad = {
        "      bleu: {absolute_margin: 0.02}\n": "key 'modelbench.gate.metrics.bleu': no metric 'bleu' in metric_list",
        "      acc: {margin: 0.02}\n": "key 'modelbench.gate.metrics.acc' may only hold",
        "      acc: {ideal: 0.5}\n": r"bad.yaml: key 'modelbench.gate.metrics.acc.ideal' is for a metric the task's "
                                    r"own code computes .*'acc' has its direction from the metric registry",
    }
    for block, message in bad.items():
        text = BASE + "modelbench:\n  gate:\n    metrics:\n" + block
        with pytest.raises(TaskConfigError, match=message):
            load_task_config(write(tmp_path, "bad.yaml", text))


def test_group_gate_block_names_only_aggregated_metrics_and_sets_no_ideal_point(tmp_path):
    group = "group: g\ntask: [t]\naggregate_metric_list:\n  - metric: acc\nmodelbench:\n  gate:\n    metrics:\n"
    config = load_group_config(write(tmp_path, "g.yaml", group + "      acc: {absolute_margin: 0.02}\n"))
    assert config.gate.metrics == {"acc": {"absolute_margin": 0.02}}
    bad = {
        "      acc_norm: {absolute_margin: 0.02}\n": r"bad.yaml: key 'modelbench.gate.metrics.acc_norm': no metric "
                                                  r"'acc_norm' in aggregate_metric_list or derived from it \(acc\)",
        "      acc: {ideal: 0.5}\n": r"bad.yaml: key 'modelbench.gate.metrics.acc.ideal' belongs in the task files "
                                  r"that compute 'acc'",
        "      bias_score: {ideal: 0}\n": r"bad.yaml: key 'modelbench.gate.metrics.bias_score': no metric",
    }
    for block, message in bad.items():
        with pytest.raises(TaskConfigError, match=message):
            load_group_config(write(tmp_path, "bad.yaml", group + block))


def test_is_task_file(tmp_path):
    assert is_task_file(write(tmp_path, "t.yaml", BASE))
    assert not is_task_file(write(tmp_path, "g.yaml", "group: g\ntask: [a, b]\n"))
    assert not is_task_file(write(tmp_path, "ci.yaml", "on: push\njobs: {}\n"))
    assert is_task_file(write(tmp_path, "broken.yaml", "task: [oops\n"))  # collected so its error shows
