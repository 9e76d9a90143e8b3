#!/usr/bin/env bash
# The tests that need no model (scripts/gate_core_tests.py: gate core, task engine, metrics, outputs) on every
# supported Python, each in its own venv with only the light packages those layers use: no torch, no transformers.
#   bash scripts/test-gate-core-pythons.sh [VERSION ...]      (default: 3.10 3.11 3.12 3.13, from pyenv)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv-dir.sh
versions=("$@")
[ ${#versions[@]} -gt 0 ] || versions=(3.10 3.11 3.12 3.13)
mapfile -t tests < <(python3 scripts/gate_core_tests.py)
packages=(numpy pyyaml jinja2 jsonschema sacrebleu pytest pytest-xdist hypothesis)
for version in "${versions[@]}"; do
  python="$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}/versions/$version".*/bin/python 2>/dev/null | sort -V | tail -n1)"
  [ -n "$python" ] || python="$(command -v "python$version" || true)"
  [ -n "$python" ] || { echo "Python $version: not found (pyenv or python$version on PATH)" >&2; exit 1; }
  venv=".venv-py$version"
  prepare_venv_dir "$venv"
  [ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
  # the newest release of each that this Python gets: the other end from requirements/lowest.txt
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "${packages[@]}"
  echo "== Python $("$venv/bin/python" -c 'import platform; print(platform.python_version())'):" \
       "${#tests[@]} test modules, numpy $("$venv/bin/python" -c 'import numpy; print(numpy.__version__)')"
  # The package from the checkout (not installed: that would pull torch); no plugin autoload (the checkout's
  # egg-info would load this plugin, which needs torch): xdist by name, the slow tier left to the main venv.
  PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 PYTHONPATH="$PWD" "$venv/bin/python" -m pytest -q -p no:cacheprovider -p xdist \
      -n 2 -m "not slow" "${tests[@]}"
done
