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
