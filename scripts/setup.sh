#!/usr/bin/env bash
# Installs what the build needs when it is missing: protoc (Lance's build compiles protobufs).
set -euo pipefail
if ! command -v protoc >/dev/null 2>&1; then
  echo "installing protobuf-compiler (protoc)..."
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq protobuf-compiler >/dev/null
fi
command -v cargo >/dev/null 2>&1 || { echo "cargo is required (https://rustup.rs)"; exit 1; }
# pylance 14.0.2 in a private virtualenv, for the Python interop tests.
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="$root/python/.venv"
if ! "$venv/bin/python" -c "import lance; assert lance.__version__ == '14.0.2'" >/dev/null 2>&1; then
  echo "installing pylance 14.0.2 into python/.venv..."
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q "pylance==14.0.2"
fi
