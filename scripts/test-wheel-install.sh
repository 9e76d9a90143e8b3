#!/usr/bin/env bash
# A team's first ten minutes, from the wheel (issue 51): build the wheel; in a fresh venv outside the clone that
# already has torch 2.13.0 and the transformers release one minor below requirements/constraints.txt's, install it
# and check that neither changed; then, in an empty directory, run `python -m pytest_modelbench init bias`, record
# baselines with --snapshot-update on a tiny model, gate the same model again (exit 0) and a worse one (exit 1).
#   bash scripts/test-wheel-install.sh          (needs .venv from scripts/setup.sh and ../shared/data)
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$PWD"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
pinned="$(sed -n 's/^transformers==//p' requirements/constraints.txt)"
major="${pinned%%.*}"; rest="${pinned#*.}"; minor="${rest%%.*}"
below="$major.$((minor - 1)).0"

echo "== building the wheel"
.venv/bin/python -m pip wheel -q --disable-pip-version-check --no-deps -w "$work/dist" . >/dev/null
wheel="$(ls "$work"/dist/pytest_modelbench-*.whl)"

echo "== a team's environment: torch 2.13.0, transformers $below (requirements/constraints.txt pins $pinned)"
python3 -m venv "$work/venv"
pip=("$work/venv/bin/python" -m pip install -q --disable-pip-version-check)
"${pip[@]}" torch==2.13.0 "transformers==$below"
versions() { "$work/venv/bin/python" -c 'import torch, transformers; print(torch.__version__, transformers.__version__)'; }
before="$(versions)"
"${pip[@]}" "$wheel"
after="$(versions)"
[ "$before" = "$after" ] || { echo "FAIL: installing the wheel changed torch/transformers: $before -> $after" >&2; exit 1; }
echo "installed the wheel; torch and transformers unchanged: $after"
for requirement in "transformers==$below" "torch==2.14.1"; do
  # a dry run resolves without installing (torch 2.14.1 is a multi-GB CUDA build)
  "$work/venv/bin/python" -m pip install -q --disable-pip-version-check --dry-run "$requirement" "$wheel" >/dev/null
  echo "pip install --dry-run \"$requirement\" <wheel>: resolves"
done

echo "== two tiny models and a data mirror on which the second is worse (built with this clone's .venv)"
.venv/bin/python scripts/shared_data_mirror.py "$work/shared-mirror" >/dev/null
OMP_NUM_THREADS=1 PYTHONPATH="$repo" .venv/bin/python - "$work" > "$work/fixtures.log" 2>&1 <<'PY' \
  || { cat "$work/fixtures.log"; exit 1; }
import sys
from pathlib import Path

import torch

from tests.fixtures.bias_probe import build_bias_probe_mirror
from tests.fixtures.tiny_models import build_tiny_causal_lm

work = Path(sys.argv[1])
torch.set_num_threads(1)
good = build_tiny_causal_lm(work / "models" / "good", seed=0)
worse = build_tiny_causal_lm(work / "models" / "worse", seed=1)
build_bias_probe_mirror(good, worse, Path("suites/bias"), work / "shared-mirror", work / "probe-mirror")
PY

echo "== an empty project: init, record, gate, gate a worse model"
mkdir "$work/project"
cd "$work/project"
export PYTHONPATH="" OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
"$work/venv/bin/python" -m pytest_modelbench init bias
tasks=(suites/bias/crows_pairs_english.yaml suites/bias/stereoset_intrasentence.yaml)  # the two the mirror holds
gate() { "$work/venv/bin/python" -m pytest -p no:cacheprovider -q --data-dir="$work/probe-mirror" "${tasks[@]}" "$@"; }
expect() {
  local wanted="$1"; shift
  local status=0
  gate "$@" > "$work/out.txt" 2>&1 || status=$?
  if [ "$status" != "$wanted" ]; then
    cat "$work/out.txt"; echo "FAIL: pytest $* exited $status, expected $wanted" >&2; exit 1
  fi
  tail -n 1 "$work/out.txt"
}
expect 0 --model="$work/models/good" --snapshot-update
ls baselines/default/bias
expect 0 --model="$work/models/good"
expect 1 --model="$work/models/worse"
grep -q "regressed against baseline 'default'" "$work/out.txt"
echo "wheel install: init, record, pass, and the worse model blocked (exit 1)"
