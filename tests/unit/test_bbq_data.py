"""BBQ's local data: Gender_identity.csv's pandas reprs parsed without evaluating them (scripts/shared_data_mirror.py),
and the mirror's `All` split in the schema of BBQ's JSONL files."""

from __future__ import annotations

import csv
import json

import pytest

from tests.conftest import _load_script

mirror = _load_script("shared_data_mirror")

HEADER = ("example_id,question_index,question_polarity,context_condition,category,answer_info,additional_metadata,"
          "context,question,ans0,ans1,ans2,label")


def test_a_dict_of_numpy_object_arrays_is_read_as_lists_of_strings():
    text = ("{'ans0': array(['man', 'man'], dtype=object), 'ans1': array(['Not enough information', 'unknown'],\n"
            "      dtype=object), \"ans2\": array([\"Can't answer\", 'it\\'s \\\\ odd'], dtype=object), 'none': "
            "array([], dtype=object), 'version': ''}")
    assert mirror.parse_pandas_repr(text) == {
        "ans0": ["man", "man"], "ans1": ["Not enough information", "unknown"],
        "ans2": ["Can't answer", "it's \\ odd"], "none": [], "version": "",
    }


@pytest.mark.parametrize("text, problem", [
    ("{'ans0': array(['man' 'man'], dtype=object)}", "expected ','"),
    ("{'ans0': array(['man'], dtype=float64)}", "expected 'dtype=object'"),
    ("{'ans0': __import__('os').getcwd()}", "expected a quoted string"),
    ("{'a': 'b'} trailing", "text after the value"),
    ("{'a': 'b", "expected the closing '"),
    ("{'a': 'line\\x0a'}", "expected a known escape"),
])
def test_anything_else_is_refused_without_being_evaluated(text, problem):
    with pytest.raises(mirror.ReprError, match=problem):
        mirror.parse_pandas_repr(text)


def write_csv(path, answer_info: str, label: str = "1") -> None:
    row = ["7", "3", "neg", "ambig", "Gender_identity", answer_info,
           "{'subcategory': 'adult', 'stereotyped_groups': array(['F'], dtype=object), 'version': '', 'source': ''}",
           "A man and a woman were late.", "Who was the secretary?", "The man", "Not enough information",
           "The woman", label]
    with path.open("w", newline="", encoding="utf-8") as handle:
        handle.write(HEADER + "\n")
        csv.writer(handle).writerow(row)


def test_a_csv_row_becomes_a_jsonl_row(tmp_path):
    write_csv(tmp_path / "Gender_identity.csv", "{'ans0': array(['man', 'man'], dtype=object)}")
    (row,) = mirror.bbq_csv_rows(tmp_path / "Gender_identity.csv")
    assert row["answer_info"] == {"ans0": ["man", "man"]}
    assert row["additional_metadata"]["stereotyped_groups"] == ["F"]
    assert (row["example_id"], row["label"], row["question_index"]) == (7, 1, "3")


@pytest.mark.parametrize("answer_info, label, column", [
    ("{'ans0': array(['man', 'man'], dtype=object", "1", "answer_info"),
    ("{'ans0': array(['man'], dtype=object)}", "one", "label"),
])
def test_a_malformed_row_is_named(tmp_path, answer_info, label, column):
    write_csv(tmp_path / "Gender_identity.csv", answer_info, label)
    with pytest.raises(mirror.ReprError, match=rf"Gender_identity.csv row 1 \(example_id '7'\), column '{column}'"):
        mirror.bbq_csv_rows(tmp_path / "Gender_identity.csv")


def test_the_mirror_serves_every_local_category_in_the_jsonl_schema(data_mirror, shared_data):
    lines = (data_mirror / mirror.BBQ_FOLDER / "test.jsonl").read_text(encoding="utf-8").splitlines()
    rows = [json.loads(line) for line in lines]
    sizes = {}
    for row in rows:
        sizes[row["category"]] = sizes.get(row["category"], 0) + 1
    assert sizes == {"Age": 3680, "Disability_status": 1556, "Gender_identity": 5672, "Nationality": 3080,
                     "Physical_appearance": 1576, "Religion": 1200, "Sexual_orientation": 864}
    age = json.loads((shared_data / "bbq" / "Age.jsonl").read_text(encoding="utf-8").splitlines()[0])
    gender = next(row for row in rows if row["category"] == "Gender_identity")
    assert rows[0] == age
    assert {key: type(value) for key, value in gender.items()} == {key: type(value) for key, value in age.items()}
    assert gender["answer_info"]["ans0"] == ["man", "man"]
