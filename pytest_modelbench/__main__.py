"""`python -m pytest_modelbench COMMAND`: `init` starts a project of one's own, `merge` judges a sharded session.

`init [SUITE ...]` writes the chosen shipped suites, a pytest.ini, an empty baselines/ and the CI workflow into the
current directory, refusing to overwrite anything (project_init.py); it exits 4 (as a pytest usage error) when it
refuses, with one line naming every conflict.

`merge RECORD... [-- PYTEST_ARGS...]`: one verdict from the run records of a session's shards, recomputed in this
checkout. The merge collects the session here with PYTEST_ARGS (the shards' selection and gate options, without
--model, --shard and --run-record; pytest_plugin/merge_project.py), so the gate policy is this checkout's; it
recomputes every verdict from the records' evidence (outputs/record_merge.py), prints the scores and the gate's
summary as the one process would, writes the reports asked for, and exits as pytest would have (0 passed, 1 a task
or test failed or a baseline is unused, 7 only runs failed: tasks in `error`, docs/integrity.md); records that cannot
be merged exit 4 with one line naming them.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

from pytest_modelbench.atomic_files import write_text_atomic
from pytest_modelbench.errors import ModelbenchError
from pytest_modelbench.gate.decision import EXIT_STATUS_WRITE_FAILED
from pytest_modelbench.pytest_plugin.merge_project import project_gate
from pytest_modelbench.outputs.record_merge import merge
from pytest_modelbench.outputs.run_record import read_record
from pytest_modelbench.outputs.session_reports import terminal_section, write_reports
from pytest_modelbench.project_init import DEFAULT_SUITES, init_project, shipped_suites
from pytest_modelbench.text_format import format_table

EXIT_REFUSED = 4


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m pytest_modelbench")
    commands = parser.add_subparsers(dest="command", required=True)
    merging = commands.add_parser(
        "merge", help="judge the run records of a session's shards as one session",
        usage="python -m pytest_modelbench merge RECORD... [options] [-- PYTEST_ARGS...]",
        epilog="PYTEST_ARGS: the shards' pytest arguments (their selection and gate options, without --model, --shard "
        "and --run-record); the merge collects the session with them in the current directory, the checkout the "
        "shards ran")
    starting = commands.add_parser(
        "init", help="write shipped suites, a pytest.ini, baselines/ and a CI workflow into this project",
        usage="python -m pytest_modelbench init [SUITE ...] [--dir DIR] [--no-pytest-ini] [--list]",
        epilog="Nothing that exists is overwritten: one conflict and nothing is written. The suites are copies, "
        "yours to edit (margins, categories, weights) and to review with the baselines you record from them.")
    starting.add_argument("suites", nargs="*", metavar="SUITE",
                          help=f"shipped suites to copy into suites/ (default: {' '.join(DEFAULT_SUITES)})")
    starting.add_argument("--dir", type=Path, default=Path("."), help="the project (default: the current directory)")
    starting.add_argument("--no-pytest-ini", action="store_true",
                          help="write no pytest.ini (your pytest configuration already sets modelbench_suites)")
    starting.add_argument("--list", action="store_true", help="list the shipped suites and their tasks, write nothing")
    merging.add_argument("records", nargs="+", type=Path, metavar="RECORD", help="one run record per shard")
    merging.add_argument("--results-json", type=Path, metavar="PATH", help="write the session's scores and verdicts")
    merging.add_argument("--md-report", type=Path, metavar="PATH", help="write the gate results as markdown")
    merging.add_argument("--html-report", type=Path, metavar="PATH", help="write the gate results as an HTML page")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    pytest_args = argv[argv.index("--") + 1:] if "--" in argv else []
    args = _parser().parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    if args.command == "init":
        return _init(args)
    return _merge(args, pytest_args)


def _init(args: argparse.Namespace) -> int:
    if args.list:
        for name, folder in shipped_suites().items():
            tasks = sorted(entry.name[:-len(".yaml")] for entry in folder.iterdir() if entry.name.endswith(".yaml"))
            print(f"{name}: {', '.join(tasks)}")
        return 0
    try:
        result = init_project(args.dir, args.suites or list(DEFAULT_SUITES), write_pytest_ini=not args.no_pytest_ini)
    except ModelbenchError as exc:
        print(f"modelbench init: refused: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    for path in result.written:
        print(f"wrote {args.dir / path}")
    for path in result.kept:
        print(f"kept {args.dir / path} (exists)")
    for line in result.advice:
        print(f"note: {line}")
    print("next: record baselines from the checkpoint you trust, commit them, then gate candidates against them:\n"
          "  pytest --model=ORG/CKPT-V1 --snapshot-update\n"
          "  git add suites baselines pytest.ini .github && git commit -m 'model gate'\n"
          "  pytest --model=ORG/CKPT-V2")
    return 0


def _merge(args: argparse.Namespace, pytest_args: list[str]) -> int:
    try:
        records = [read_record(path) for path in args.records]
        project = project_gate(pytest_args)
        merged = merge(records, session=project.session, policy=project.policy, store=project.store,
                       split=project.split, identities=project.identities, tolerances=project.tolerances)
    except ModelbenchError as exc:
        print(f"modelbench merge: refused: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    rows = [tuple(row) for scores in merged.scores for row in scores["rows"]]
    if rows:
        print("modelbench scores")
        for line in format_table(("task", "category", "metric", "value ± stderr", "n"), rows):
            print(line)
    title, lines = terminal_section(merged.decision)
    if lines:
        print(title)
        for line in lines:
            print(line)
    outputs = []
    if args.results_json is not None:
        outputs.append(("--results-json", args.results_json, merged.results_json()))
    write_reports(merged.decision, md_report=args.md_report, html_report=args.html_report,
                  write=lambda option, path, text: outputs.append((option, path, text)))
    for option, path, text in outputs:
        try:
            write_text_atomic(path, text)
        except OSError as exc:
            print(f"modelbench merge: {option} {path}: cannot write the file ({exc.strerror or exc}); it is left as it "
                  "was, nothing half-written", file=sys.stderr)
            return EXIT_STATUS_WRITE_FAILED
    shards = len(merged.records)
    print(f"modelbench merge: {shards} shard(s) of session {merged.records[0].session_id} merged")
    return merged.exit_status


if __name__ == "__main__":
    sys.exit(main())
