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
# The e2e tests run beside Bazel's tests, as two pytest processes (conftest.py's --shard): each
# spends most of its time in one single-threaded interpreter, so one alone would leave a core
# idle once Bazel ends. Their output is printed once they end.
# --durations: the slowest e2e tests, to keep CI within its 30 minutes.
e2e_logs=("$(mktemp)" "$(mktemp)")
e2e_pids=()
for shard in 0 1; do
  python -m pytest --skip-bazel-tests --shard="${shard}/2" -rf --durations=10 \
    >"${e2e_logs[shard]}" 2>&1 &
  e2e_pids+=($!)
done
trap 'kill "${e2e_pids[@]}" 2>/dev/null || true; rm -f "${e2e_logs[@]}"' EXIT

echo "== bazel test //... --test_tag_filters=-e2e (every other test; the e2e tests run alongside)"
bazel_status=0
bazel test //... --test_tag_filters=-e2e || bazel_status=$?

e2e_status=0
for shard in 0 1; do
  wait "${e2e_pids[shard]}" || e2e_status=$?
  echo "== pytest --skip-bazel-tests --shard=${shard}/2 (the e2e tests)"
  cat "${e2e_logs[shard]}"
done
if ((bazel_status || e2e_status)); then
  echo "FAILED: bazel test exit status ${bazel_status}, pytest exit status ${e2e_status}" >&2
  exit 1
fi
