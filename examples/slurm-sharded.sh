#!/usr/bin/env bash
# One shard of a sharded gate on Slurm: an array job, one task per shard, one GPU each.
# Submit it with examples/slurm-submit.sh, which also submits the merge to run after every shard (afterany):
#   bash examples/slurm-submit.sh org/ckpt-v2
# The two submissions it makes, in short (RUN_DIR: a new folder per run, so no record of an earlier run is merged):
#   array=$(sbatch --parsable --array=1-4 --export=ALL,MODEL=org/ckpt-v2,RUN_DIR=runs/x examples/slurm-sharded.sh)
#   sbatch --dependency=afterany:${array%%;*} --wrap ".venv-gpu/bin/python -m pytest_modelbench merge runs/x/shard-*.json ..."
#
# Run from a checkout on a shared filesystem that nobody edits while the array runs: every shard reads its task
# YAMLs and baselines, and the merge refuses records of other tasks, configs or baselines.
# The environment ($VENV) is one virtual environment on that filesystem, so every shard has the same package
# versions (the merge compares them). Create it once, on a GPU node, with the torch build for your CUDA:
#   python3 -m venv .venv-gpu
#   .venv-gpu/bin/python -m pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128   # yours
#   .venv-gpu/bin/python -m pip install -e ".[test]"
#
#SBATCH --job-name=modelbench-shard
#SBATCH --array=1-4
#SBATCH --gres=gpu:1
#SBATCH --cpus-per-task=8
#SBATCH --mem=64G
#SBATCH --time=04:00:00
#SBATCH --output=modelbench-shard-%A_%a.out
set -euo pipefail
cd "${SLURM_SUBMIT_DIR:?submit with sbatch from the checkout}"

: "${MODEL:?MODEL (the checkpoint: hub id or folder) must be exported to the job}"
VENV="${VENV:-.venv-gpu}"
RUN_DIR="${RUN_DIR:-runs/$SLURM_ARRAY_JOB_ID}"   # where the records go; the merge reads them from there
BASELINE_NAME="${BASELINE_NAME:-release}"
SUITES="${SUITES:-suites}"
# The same options on every shard (they decide the split, and the merge compares the ones that change numbers).
default_options="--dtype=bfloat16 --batch-size=auto -p no:cacheprovider"
read -r -a OPTIONS <<< "${PYTEST_OPTIONS:-$default_options}"
# A baseline ref, if any, as a commit id (slurm-submit.sh resolves it once): a branch could move between shards.
if [ -n "${BASELINE_REF:-}" ]; then OPTIONS+=(--baseline-ref="$BASELINE_REF"); fi

shard="$SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT"   # 1-based: --array must be 1-N
# One score cache per shard (a shard gets the same tasks on a re-run): never one SQLite file shared across nodes.
export MODELBENCH_CACHE_DIR="${MODELBENCH_CACHE_DIR:-$PWD/.modelbench-cache}/shard-$SLURM_ARRAY_TASK_ID"
mkdir -p "$RUN_DIR" "$MODELBENCH_CACHE_DIR"

echo "shard $shard on $(hostname), GPU ${CUDA_VISIBLE_DEVICES:-?}: $MODEL"
# Slurm's CUDA_VISIBLE_DEVICES leaves this task's one GPU visible, as cuda:0.
exec "$VENV/bin/python" -m pytest "$SUITES" --model="$MODEL" --device=cuda:0 --baseline-name="$BASELINE_NAME" \
    "${OPTIONS[@]}" --shard "$shard" --run-record "$RUN_DIR/shard-$SLURM_ARRAY_TASK_ID.json"
