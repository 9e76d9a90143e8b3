"""The gate modes harness's deep tier (docs/gate-modes.md): many generated scenarios, each gated in process in every
mode, with the invariants checked (tests/fixtures/mode_invariants.py, the fast tier's code).

    python benchmarks/gate_modes_deep.py [--scenarios 10000] [--start 0] [--workers 2] [--first-failure]

Prints the scenarios run, the time, each finding (the broken invariant, the scenario that broke it) grouped by
invariant, and how often --early-stop failed a session the plain run passed. `--first-failure`: stop at the first scenario that breaks one and print how many were run to find it
(the check that the harness finds a defect planted in the code)."""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def one(seed: int) -> tuple[int, list[str], tuple[int, int]]:
    """The scenario's findings, and the plain run's and the early stop's exit statuses."""
    from tests.fixtures.mode_invariants import findings

    with tempfile.TemporaryDirectory() as folder:
        try:
            found, views = findings(seed, Path(folder))
        except Exception as exc:  # a scenario the code under test cannot even run is a finding too
            return seed, [f"scenario {seed}\n  raised {type(exc).__name__}: {exc}"], (-1, -1)
        return seed, found, (views["plain"].exit_status, views["early stop"].exit_status)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", type=int, default=10000)
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--first-failure", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    started = time.time()
    seeds = range(args.start, args.start + args.scenarios)
    broken: dict[int, list[str]] = {}
    exits: Counter = Counter()
    run = 0
    try:
        with multiprocessing.get_context("fork").Pool(args.workers) as pool:
            for seed, found, statuses in pool.imap(one, seeds, chunksize=4):
                run += 1
                exits[statuses] += 1
                if found:
                    broken[seed] = found
                    print(f"finding in scenario {seed}: {found[0].split(chr(10), 1)[1].strip()[:300]}", flush=True)
                    if args.first_failure:
                        print(f"first failure at scenario {seed}, after {run} scenarios "
                              f"({time.time() - started:.0f} s):")
                        print("\n".join(found))
                        pool.terminate()
                        return 1
                if run % 500 == 0:
                    print(f"{run} scenarios, {len(broken)} with findings, {time.time() - started:.0f} s", flush=True)
    except KeyboardInterrupt:  # stopped early: the summary of the scenarios run so far
        print(f"interrupted after {run} scenarios")
    kinds = Counter(line.split("\n  ", 1)[1].split(":")[0].split(" judged ")[0] for found in broken.values()
                    for line in found)
    print(f"{run} scenarios (seeds {args.start} to {args.start + run - 1}) in {time.time() - started:.0f} s "
          f"on {args.workers} workers: {len(broken)} with findings")
    for kind, count in kinds.most_common():
        print(f"  {count:5d}  {kind}")
    passed = sum(n for (plain, _), n in exits.items() if plain == 0)
    blocked_early = sum(n for (plain, early), n in exits.items() if plain == 0 and early != 0)
    print(f"plain run passed {passed} sessions; --early-stop failed {blocked_early} of them "
          f"({blocked_early / max(passed, 1):.2%}); exit statuses (plain, early stop): {dict(sorted(exits.items()))}")
    for seed in sorted(broken)[:5]:
        print("\n".join(broken[seed]))
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
