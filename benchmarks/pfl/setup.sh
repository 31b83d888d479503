#!/usr/bin/env bash
# Builds .venv-pfl, the environment of the pfl side of benchmarks/vs_pfl.py, from
# benchmarks/pfl/requirements.lock (`make pfl-venv`). Apart from .venv: pfl is not a dependency of
# fedasr_tff. Idempotent: a second run checks the stamp and returns at once.
set -euo pipefail
cd "$(dirname "$0")/../.."

LOCK=benchmarks/pfl/requirements.lock
VENV=.venv-pfl
STAMP="$VENV/.pfl-setup-stamp"

PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3
want="$(sha256sum "$LOCK" | cut -d' ' -f1) $("$PYTHON" --version 2>&1)"
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$want" ]]; then
  echo "pfl-venv: $VENV is up to date"
  exit 0
fi

echo "pfl-venv: building $VENV from $LOCK"
rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade "pip==23.2.1"
# Every package at an exact version: no resolution needed (or wanted).
"$VENV/bin/pip" install -q --no-deps -r "$LOCK"
if ! out=$(TF_CPP_MIN_LOG_LEVEL=3 "$VENV/bin/python" -c \
    "import pfl.model.tensorflow, pfl.aggregate.simulate, pfl.privacy" 2>&1); then
  echo "$out" >&2
  exit 1
fi
echo "$want" > "$STAMP"
echo "pfl-venv: done"
