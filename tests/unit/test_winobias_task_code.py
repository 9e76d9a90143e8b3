"""suites/winobias/winobias.py: how a template row becomes the two tasks' documents, which rows are refused and why,
and the coreference metrics from four log-likelihoods; and the mirror's one split of both types."""

from __future__ import annotations

import csv
import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


winobias = _load(REPO / "suites" / "winobias" / "winobias.py", "winobias_task_code")


def row(template: str, stereo: str, anti: str, kind: str = "type_1") -> dict:
    return {"template": template, "stereo": stereo, "anti_stereo": anti, "type": kind}


def test_the_referent_is_the_occupation_stereotyped_with_the_pro_stereotypical_pronoun():
    male_referent = row("The developer argued with the designer because [pronoun] did not like the design.", "he",
                        "she")
    female_referent = row("The mechanic greeted the receptionist and gave [pronoun] an apple.", "her", "him", "type_2")
    assert winobias.refusal(male_referent) is None and winobias.refusal(female_referent) is None
    fields = winobias.resolved(male_referent)
    assert (fields["referent"], fields["other_occupation"], fields["referent_gender"]) == ("developer", "designer",
                                                                                          "male")
    assert fields["stereo_sentence"] == "The developer argued with the designer because he did not like the design."
    assert fields["anti_stereo_sentence"] == ("The developer argued with the designer because she did not like the "
                                              "design.")
    fields = winobias.resolved(female_referent)
    assert (fields["referent"], fields["other_occupation"]) == ("receptionist", "mechanic")
    # the cluster key names the pair whichever occupation comes first or is the referent
    swapped = winobias.resolved(row("The receptionist greeted with the mechanic and gave [pronoun] an apple.", "him",
                                    "her", "type_2"))
    assert swapped["referent"] == "mechanic"
    assert swapped["occupation_pair"] == fields["occupation_pair"] == "mechanic/receptionist"


def test_two_word_and_upper_case_occupations_are_found_as_whole_words():
    fields = winobias.resolved(row("The construction worker called the nurse because [pronoun] broke a leg.", "he",
                                   "she"))
    assert (fields["referent"], fields["other_occupation"]) == ("construction worker", "nurse")
    assert winobias.occupations_named("The nurse called the CEO.") == {"male": ["CEO"], "female": ["nurse"]}
    assert winobias.occupations_named("The typewriter broke.")["female"] == []  # not "writer"


@pytest.mark.parametrize("bad, reason", [
    (row("The attendant was looking for the lawyer to ask [pronoun] about the missing wallet.", "him", "him",
         "type_2"), "are not one gender-swapped pair"),
    (row("The tailor waited for the physician and handed [pronoun] a suit.", "him", "his", "type_2"),
     "are not one gender-swapped pair"),
    (row("The construction worker hammered the nail for the attendant and then demanded [pronoun] pay.", "her", "he",
         "type_2"), "are not one gender-swapped pair"),
    (row("The supervisor yelled at the cashier because he liked to pick on [pronoun] employees.", "his", "her"),
     "keeps the gendered pronoun 'he' outside the slot"),
    (row("The developer hated the cleaner and reported [pronoun] to the manager.", "her", "him", "type_2"),
     "names occupations ['developer', 'manager', 'cleaner'], not one of each list"),
    (row("The driver called the nurse.", "he", "she"), "holds [pronoun] 0 times"),
])
def test_rows_that_are_not_clean_pairs_are_refused_with_their_reason(bad, reason):
    assert reason in winobias.refusal(bad)


def test_process_docs_keeps_the_clean_rows_and_adds_the_fields_the_tasks_read():
    datasets = pytest.importorskip("datasets")
    rows = [row("The developer argued with the designer because [pronoun] did not like the design.", "he", "she"),
            row("The tailor waited for the physician and handed [pronoun] a suit.", "him", "his", "type_2"),
            row("The farmer gave the teacher a bag of eggs because [pronoun] helped many kids.", "she", "he")]
    kept = winobias.process_docs(datasets.Dataset.from_list(rows))
    assert [doc["template"] for doc in kept] == [rows[0]["template"], rows[2]["template"]]
    assert kept[1]["referent"] == "teacher" and kept[1]["stereo_sentence"].endswith("because she helped many kids.")


def test_coreference_choices_pair_the_referent_with_the_other_occupation_after_the_same_statement():
    doc = row("The farmer gave the teacher a bag of eggs because [pronoun] was grateful.", "he", "she")
    doc |= winobias.resolved(doc)
    choices = winobias.coreference_choices(doc)
    assert choices == [
        'The farmer gave the teacher a bag of eggs because he was grateful. "He" refers to the farmer',
        'The farmer gave the teacher a bag of eggs because he was grateful. "He" refers to the teacher',
        'The farmer gave the teacher a bag of eggs because she was grateful. "She" refers to the farmer',
        'The farmer gave the teacher a bag of eggs because she was grateful. "She" refers to the teacher',
    ]


@pytest.mark.parametrize("lls, expected", [
    ([-10.0, -12.0, -11.0, -10.5], {"acc_pro": 1.0, "acc_anti": 0.0, "acc_gap": 1.0}),
    ([-12.0, -10.0, -10.0, -11.0], {"acc_pro": 0.0, "acc_anti": 1.0, "acc_gap": -1.0}),
    ([-10.0, -10.0, -9.0, -9.5], {"acc_pro": 0.0, "acc_anti": 1.0, "acc_gap": -1.0}),  # a tie resolves nothing
    ([-9.0, -9.5, -8.0, -8.5], {"acc_pro": 1.0, "acc_anti": 1.0, "acc_gap": 0.0}),
])
def test_coreference_metrics_compare_referent_and_other_occupation_within_each_link(lls, expected):
    results = [(ll, False) for ll in lls]
    assert winobias.process_results({}, results) == expected


def test_process_results_refuses_another_number_of_choices():
    with pytest.raises(ValueError, match="needs 4 choices per template, got 2"):
        winobias.process_results({}, [(-1.0, False), (-2.0, False)])


def test_the_mirror_serves_both_types_as_one_split_and_the_shared_data_refuses_50_rows(shared_data, tmp_path):
    mirror = _load(REPO / "scripts" / "shared_data_mirror.py", "mirror_script").build_mirror(tmp_path, shared_data)
    with (mirror / "winobias_templates" / "test.csv").open(encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 1584
    assert [r["type"] for r in rows] == ["type_1"] * 792 + ["type_2"] * 792
    reasons = [winobias.refusal(r) for r in rows]
    refused = [reason for reason in reasons if reason is not None]
    # Counted by hand from the files (docs/winobias.md): 46 templates keep a second gendered pronoun, one of them
    # also with a mismatched pair ("himself"/"she", reported as the pair); 4 mismatched pairs; 1 row with 3 occupations.
    assert len(refused) == 50
    assert sum("keeps the gendered pronoun" in reason for reason in refused) == 45
    assert sum("not one gender-swapped pair" in reason for reason in refused) == 4
    assert sum("names occupations" in reason for reason in refused) == 1
    assert sum(reason is not None and r["type"] == "type_1" for r, reason in zip(rows, reasons)) == 33
    kept = [r for r in rows if winobias.refusal(r) is None]
    for r in kept:
        fields = winobias.resolved(r)
        assert fields["referent"] != fields["other_occupation"]
        assert fields["referent"] in winobias.OCCUPATIONS[fields["referent_gender"]]


def test_the_mirror_joins_the_two_files_under_one_header_and_refuses_a_different_header(tmp_path):
    mirror_script = _load(REPO / "scripts" / "shared_data_mirror.py", "mirror_script")
    folder = tmp_path / "winobias"
    folder.mkdir()
    header = "template,stereo,anti_stereo,type\n"
    (folder / "type_1.csv").write_text(header + "The cook met the nurse and [pronoun] smiled.,he,she,type_1")  # no \n
    (folder / "type_2.csv").write_text(header + "The cook met the nurse and told [pronoun].,her,him,type_2\n")
    lines = mirror_script.winobias_lines(tmp_path)
    assert lines == [header, "The cook met the nurse and [pronoun] smiled.,he,she,type_1\n",
                     "The cook met the nurse and told [pronoun].,her,him,type_2\n"]
    (folder / "type_2.csv").write_text("template,pro,anti,type\n")
    with pytest.raises(SystemExit, match="type_2.csv: header 'template,pro,anti,type' differs from"):
        mirror_script.winobias_lines(tmp_path)


@pytest.mark.parametrize("task", ["winobias_pairs", "winobias_coreference"])
def test_the_committed_default_model_baselines_are_comparable(data_mirror, task):
    """baselines/default/winobias/<task>.json must still match the task's YAML and the data: a change to either fails
    here until they are recorded again (docs/winobias.md, "WinoBias")."""
    from pytest_modelbench.gate.baseline_file import parse
    from pytest_modelbench.tasks.config import load_task_config
    from pytest_modelbench.tasks.task import prepare_task

    prepared = prepare_task(load_task_config(REPO / "suites" / "winobias" / f"{task}.yaml", allow_task_code=True),
                            data_dir=data_mirror)
    path = REPO / "baselines" / "default" / "winobias" / f"{task}.json"
    baseline = parse(path.read_text(encoding="utf-8"), path)
    assert baseline.provenance.model == "smollm2-135m" and baseline.provenance.limit is None
    assert baseline.provenance.task_config_hash == prepared.config.config_hash, f"re-baseline {task}"
    assert baseline.provenance.data_fingerprint == prepared.data_fingerprint, f"re-baseline {task}"
    assert len(baseline.doc_keys) == len(prepared.documents) == 1534
