#!/usr/bin/env bash
# Submit a sharded gate to Slurm: the shards as one array job (examples/slurm-sharded.sh, one GPU each), and the
# merge as a job that starts once every shard has ended, however it ended (afterany), and gives the one verdict.
#   bash examples/slurm-submit.sh CHECKPOINT [SHARDS]        (default 4 shards)
# Environment (optional): VENV (.venv-gpu), BASELINE_NAME (release), BASELINE_REF (e.g. origin/main),
# SUITES (suites), PYTEST_OPTIONS (see slurm-sharded.sh), SBATCH_ARGS (e.g. "--partition=gpu --account=team").
# Run it from the checkout, on the shared filesystem the nodes see. The merge job's exit code is the verdict:
# 0 pass, 1 a task regressed or failed, 4 records refused (`sacct -j MERGE_ID -o JobID,State,ExitCode`).
set -euo pipefail
cd "$(dirname "$0")/.."
model="${1:?usage: bash examples/slurm-submit.sh CHECKPOINT [SHARDS]}"
shards="${2:-4}"
venv="${VENV:-.venv-gpu}"
[ -x "$venv/bin/python" ] || { echo "no $venv: create it first (see examples/slurm-sharded.sh)" >&2; exit 2; }
read -r -a extra <<< "${SBATCH_ARGS:-}"

# A new folder per run: the merge reads only this run's records, never a stale one.
run_dir="runs/$(date +%Y%m%d-%H%M%S)"
mkdir -p "$run_dir"
# The baselines' git ref resolved once, to a commit, so that every shard reads the same baselines.
ref=""
if [ -n "${BASELINE_REF:-}" ]; then
  ref="$(git rev-parse --verify "${BASELINE_REF}^{commit}")"
fi

array=$(sbatch --parsable "${extra[@]+"${extra[@]}"}" --array="1-$shards" --output="$run_dir/shard-%a.out" \
  --export="ALL,MODEL=$model,RUN_DIR=$run_dir,VENV=$venv,BASELINE_REF=$ref" examples/slurm-sharded.sh)
array="${array%%;*}"   # --parsable prints "jobid" or "jobid;cluster"

# The merge runs in this checkout with the shards' selection and gate options after -- (it recomputes every verdict
# under this checkout's policy). Every shard's record by name: one that is missing (a shard cut off by the time limit, or lost) makes the merge
# refuse with exit 4, as does a shard that did not finish (its record's exit status 11, 2, 3 or 4).
records=""
for k in $(seq 1 "$shards"); do records+=" $run_dir/shard-$k.json"; done
merge=$(sbatch --parsable "${extra[@]+"${extra[@]}"}" --dependency="afterany:$array" --job-name=modelbench-merge \
  --ntasks=1 --cpus-per-task=1 --mem=4G --time=00:30:00 --output="$run_dir/merge.out" \
  --wrap="$venv/bin/python -m pytest_modelbench merge$records --md-report=$run_dir/gate.md \
--html-report=$run_dir/gate.html --results-json=$run_dir/results.json -- ${SUITES:-suites} ${PYTEST_OPTIONS:-} \
--baseline-name=${BASELINE_NAME:-release}${ref:+ --baseline-ref=$ref}")
merge="${merge%%;*}"

echo "shards: array job $array ($shards tasks); merge: job $merge, after all of them"
echo "verdict: $run_dir/merge.out and $run_dir/gate.md once job $merge has ended"
# To wait here for the verdict and exit with it (a CI step, say), submit the merge with `sbatch --wait` instead.
