#!/usr/bin/env bash
# Runs every check: ruff lint, then every test once: the end-to-end ones under pytest, the rest
# under Bazel. (`python -m pytest` alone runs the whole suite.)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
# TensorFlow prints an INFO line per graph optimisation; keep warnings and errors only.
export TF_CPP_MIN_LOG_LEVEL=1

echo "== ruff"
ruff check .
echo "== pytest (the e2e tests)"
# Tag e2e: whole training runs in subprocesses, several minutes on 2 cores; the privacy audits;
# the wheel build and install, which needs the source tree. conftest.py's --skip-bazel-tests
# leaves out the modules Bazel runs next and fails on a test module no BUILD target runs.
python -m pytest --skip-bazel-tests -rf
echo "== bazel test //... (every other test)"
bazel test //... --test_tag_filters=-e2e
