#!/usr/bin/env bash
# A sharded gate against vLLM servers: each shard sends its tasks to its own server(s), then one merge gives the
# verdict. The shards run here, side by side (a shard only tokenizes, computes metrics and compares; the servers
# score), each in its own process.
#   bash examples/vllm-sharded.sh
# Environment (optional): MODEL (org/ckpt-70b), SUITES (suites), BASELINE_NAME (release), BASELINE_REF (a ref or
# commit), RUN_DIR (runs/vllm-<time>), PYTEST_OPTIONS (the other options, the same for every shard), and the
# servers: SHARD_SERVERS below, one entry per shard.
#
# Start the servers beforehand, every one serving the same checkpoint under the same name (--served-model-name):
# the merge compares the checkpoint by each shard's server fingerprint (`server:<served name>@probe:<hash>`).
#   node-a$ vllm serve /models/ckpt-70b --served-model-name org/ckpt-70b --tensor-parallel-size 8 --port 8000
#   node-b$ ... the same on node-b, node-c, node-d
# --model below gives the tokenizer (hub id or folder of that checkpoint); prompts are tokenized here.
#
# The environment here is the project's own (bash scripts/setup.sh: .venv, CPU torch): no GPU is needed on this side.
set -euo pipefail
cd "$(dirname "$0")/.."

MODEL="${MODEL:-org/ckpt-70b}"
SUITES="${SUITES:-suites}"
BASELINE_NAME="${BASELINE_NAME:-release}"
RUN_DIR="${RUN_DIR:-runs/vllm-$(date +%Y%m%d-%H%M%S)}"
# One entry per shard: that shard's servers, comma-separated (several servers of one shard share its requests).
SHARD_SERVERS=(
  "http://node-a:8000/v1"
  "http://node-b:8000/v1"
  "http://node-c:8000/v1,http://node-d:8000/v1"
)
shards=${#SHARD_SERVERS[@]}
default_options="-p no:cacheprovider"   # not --no-cache: the identity registry (step 2) lives beside the cache
read -r -a options <<< "${PYTEST_OPTIONS:-$default_options}"
if [ -n "${BASELINE_REF:-}" ]; then
  # Resolved once, to a commit: every shard must read the same baselines.
  options+=(--baseline-ref="$(git rev-parse --verify "${BASELINE_REF}^{commit}")")
fi

bash scripts/setup.sh .venv >/dev/null
python=.venv/bin/python
mkdir -p "$RUN_DIR"

# 1. Every server answers (vLLM lists what it serves at /v1/models).
for servers in "${SHARD_SERVERS[@]}"; do
  for url in ${servers//,/ }; do
    until curl -sf "${url%/}/models" >/dev/null; do echo "waiting for $url" >&2; sleep 10; done
  done
done

# 2. One score cache for the shards on this machine (one SQLite file, shared by processes of one host), seeded with
# the servers' identity: a one-document score-only run registers the first server's probe in
# $MODELBENCH_CACHE_DIR/server-identities.json, so that every shard gives the same weights the same fingerprint.
# (Shards started together on an empty registry would each fingerprint their own server's probe, and a probe value
# that rounds differently would make the merge refuse "different checkpoints".) Shards on other machines: copy that
# file into each machine's $MODELBENCH_CACHE_DIR before they start.
export MODELBENCH_CACHE_DIR="${MODELBENCH_CACHE_DIR:-$HOME/.cache/pytest-modelbench}"
status=0
"$python" -m pytest "$SUITES" -q -p no:cacheprovider --model="$MODEL" --server-url="${SHARD_SERVERS[0]}" \
  --score-only --limit=1 >"$RUN_DIR/identity.out" 2>&1 || status=$?
if [ "$status" -gt 1 ]; then   # 1: some item failed (a custom test, say); the probe ran all the same
  echo "the identity run exited $status: $RUN_DIR/identity.out" >&2
  exit 2
fi

# 3. The shards, side by side; each one's output in $RUN_DIR/shard-K.out.
pids=()
for k in $(seq 1 "$shards"); do
  "$python" -m pytest "$SUITES" --model="$MODEL" --server-url="${SHARD_SERVERS[k-1]}" \
    --baseline-name="$BASELINE_NAME" "${options[@]}" \
    --shard "$k/$shards" --run-record "$RUN_DIR/shard-$k.json" >"$RUN_DIR/shard-$k.out" 2>&1 &
  pids+=($!)
done
for k in $(seq 1 "$shards"); do
  status=0
  wait "${pids[k-1]}" || status=$?
  echo "shard $k/$shards exited $status ($RUN_DIR/shard-$k.out)"
done

# 4. The verdict: 0 pass, 1 a task regressed or failed, 4 records refused (a shard missing or unfinished, ...).
records=()
for k in $(seq 1 "$shards"); do records+=("$RUN_DIR/shard-$k.json"); done
# After --: the shards' selection and gate options; the merge recomputes every verdict in this checkout.
exec "$python" -m pytest_modelbench merge "${records[@]}" \
  --md-report="$RUN_DIR/gate.md" --html-report="$RUN_DIR/gate.html" --results-json="$RUN_DIR/results.json" \
  -- "$SUITES" --baseline-name="$BASELINE_NAME" "${options[@]}"
