#!/usr/bin/env bash
# Runs every check: ruff lint, then every test once: the end-to-end ones under pytest, the rest
# under Bazel, side by side. (`python -m pytest` alone runs the whole suite.)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
# TensorFlow prints an INFO line per graph optimisation; keep warnings and errors only.
export TF_CPP_MIN_LOG_LEVEL=1

echo "== ruff"
ruff check .

# Tag e2e: whole training runs in subprocesses, several minutes on 2 cores; the privacy audits;
# the wheel build and install, which needs the source tree. conftest.py's --skip-bazel-tests
# leaves out the modules Bazel runs and fails on a test module no BUILD target runs.
# The e2e tests mostly wait for interpreters and TFF workers to start, about 1.2 of CI's 2 cores
# on average, so they run beside Bazel's tests; their output is printed once they end.
# --durations: the slowest e2e tests, to keep CI within its 30 minutes.
e2e_log="$(mktemp)"
python -m pytest --skip-bazel-tests -rf --durations=15 >"$e2e_log" 2>&1 &
e2e_pid=$!
trap 'kill "$e2e_pid" 2>/dev/null || true; rm -f "$e2e_log"' EXIT

echo "== bazel test //... --test_tag_filters=-e2e (every other test; the e2e tests run alongside)"
bazel_status=0
bazel test //... --test_tag_filters=-e2e || bazel_status=$?

e2e_status=0
wait "$e2e_pid" || e2e_status=$?
echo "== pytest --skip-bazel-tests (the e2e tests)"
cat "$e2e_log"
if ((bazel_status || e2e_status)); then
  echo "FAILED: bazel test exit status ${bazel_status}, pytest exit status ${e2e_status}" >&2
  exit 1
fi
