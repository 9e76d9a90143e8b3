#!/usr/bin/env bash
# Set up (if needed) and run the whole test suite, slow tests on the real default model included.
#   bash scripts/test.sh [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh .venv
# The real vLLM server for tests/e2e/test_vllm_server.py (its own venv, 3.4 GB, minutes the first time).
# MODELBENCH_SKIP_VLLM=1 skips both the setup and that test.
[ "${MODELBENCH_SKIP_VLLM:-}" = 1 ] || bash scripts/setup-vllm.sh
# Two xdist workers on two cores: one torch thread each, or they oversubscribe the CPU. Work stealing: a worker that
# runs out of tests takes queued ones from the other, so the slow tests (collected first) do not end up on one worker.
export OMP_NUM_THREADS=1
exec .venv/bin/python -m pytest -n 2 --dist worksteal "$@"
