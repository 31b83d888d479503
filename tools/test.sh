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
# The end-to-end tests (tag e2e: whole training runs in subprocesses, several minutes on 2 cores;
# the privacy audits; the wheel build and install, which needs the source tree) run once, under
# pytest above; running
# them twice would not fit CI's 30 minutes.
bazel test //... --test_tag_filters=-e2e
