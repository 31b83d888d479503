#!/usr/bin/env bash
# Runs every check: ruff lint, the whole suite under pytest, and the same suite under Bazel.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
# TensorFlow prints an INFO line per graph optimisation; keep warnings and errors only.
export TF_CPP_MIN_LOG_LEVEL=1

echo "== ruff"
ruff check .
echo "== pytest"
python -m pytest
echo "== bazel test //..."
bazel test //...
