#!/usr/bin/env bash
# Installs what the build needs when it is missing: protoc (Lance's build compiles protobufs),
# cargo-nextest (the test runner), and a
# private virtualenv (python/.venv) with pylance 14.0.2, maturin, pytest, moto's S3 server, ray[data] and lance-ray; then builds and installs
# the `lance_actions` Python package into it (dev profile, sharing the workspace's target dir).
set -euo pipefail
if ! command -v protoc >/dev/null 2>&1; then
  echo "installing protobuf-compiler (protoc)..."
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq protobuf-compiler >/dev/null
fi
command -v cargo >/dev/null 2>&1 || { echo "cargo is required (https://rustup.rs)"; exit 1; }
# scripts/test.sh runs the Rust tests with cargo-nextest (each test in its own process, binaries side
# by side): installed on this machine kind; built from crates.io only where it is missing.
if ! cargo nextest --version >/dev/null 2>&1; then
  echo "cargo-nextest is missing: installing it (cargo install --locked cargo-nextest)..."
  cargo install --locked cargo-nextest
fi
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="$root/python/.venv"
if ! "$venv/bin/python" -c "import lance; assert lance.__version__ == '14.0.2'" >/dev/null 2>&1; then
  echo "installing pylance 14.0.2 into python/.venv..."
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q "pylance==14.0.2"
fi
if ! "$venv/bin/python" -c "import maturin, pytest, pandas, polars, moto.server, flask_cors" >/dev/null 2>&1; then
  echo "installing maturin, pytest, pandas, polars and moto's S3 server into python/.venv..."
  # pandas and polars: the package takes their frames as input (tested). moto[server]: the local
  # S3-compatible server the object-storage tests start on a loopback port (conditional puts included).
  "$venv/bin/pip" install -q "maturin>=1.9,<2" "pytest>=8" "pandas>=2.2" "polars>=1" "moto[server]==5.2.5"
fi
if ! "$venv/bin/python" -c "import ray.data, lance_ray" >/dev/null 2>&1; then
  echo "installing ray[data] and lance-ray into python/.venv (distributed writes, python/tests/test_distributed.py)..."
  "$venv/bin/pip" install -q "ray[data]==2.60.0" "lance-ray==0.5.0"
fi
# The extension links the same Lance build as the Rust tests: same profile, same target dir
# (CARGO_TARGET_DIR when set, the workspace's target/ otherwise), so only the bindings compile here.
if [ "${LANCE_ACTIONS_SKIP_PYTHON_BUILD:-}" != 1 ]; then
  echo "building the lance_actions Python package (maturin develop, dev profile)..."
  build_log="$(mktemp)"
  started=$(date +%s)
  if ! (cd "$root/python" && VIRTUAL_ENV="$venv" PATH="$venv/bin:$PATH" \
        "$venv/bin/maturin" develop --locked --features test-hooks >"$build_log" 2>&1); then
    tail -n 40 "$build_log"; rm -f "$build_log"
    echo "maturin develop failed"; exit 1
  fi
  rm -f "$build_log"
  "$venv/bin/python" -c "import lance_actions" || { echo "lance_actions did not install"; exit 1; }
  echo "lance_actions built and installed in $(( $(date +%s) - started )) s"
fi
