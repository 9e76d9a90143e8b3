#!/usr/bin/env bash
# The main job: set up, build the offline data mirror from ../shared/data, and gate the packaged default model
# (SmolLM2-135M-Instruct) on the bias suite against the committed baselines.
#   bash scripts/gate-default-model.sh [extra pytest args, e.g. --snapshot-update or --md-report=gate.md]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh .venv
.venv/bin/python scripts/shared_data_mirror.py .modelbench-data >/dev/null
exec .venv/bin/python -m pytest -p no:cacheprovider --model=smollm2-135m --dtype=float32 \
    --data-dir=.modelbench-data suites/bias "$@"
