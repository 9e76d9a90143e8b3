#!/usr/bin/env bash
# The main job: set up, build the offline data mirror from ../shared/data, and gate the packaged default model
# (SmolLM2-135M-Instruct) on the bias suite against the committed baselines.
#   bash scripts/gate-default-model.sh [extra pytest args, e.g. --snapshot-update or --md-report=gate.md]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh .venv
data=()
if [ -d ../shared/data ]; then
  .venv/bin/python scripts/shared_data_mirror.py .modelbench-data >/dev/null
  data=(--data-dir=.modelbench-data)
else
  # A clone without ../shared: the YAMLs' own hub datasets (downloaded once, then from the datasets cache).
  echo "no ../shared/data beside this clone: loading the bias suite's datasets from the Hugging Face Hub" \
    "(jannalu/crows_pairs_multilingual, McGill-NLP/stereoset)" >&2
fi
# The baselines are named: a clone without baselines/default/ fails (fail closed) instead of scoring ungated.
exec .venv/bin/python -m pytest -p no:cacheprovider --model=smollm2-135m --dtype=float32 --baseline-name=default \
    "${data[@]}" suites/bias "$@"
