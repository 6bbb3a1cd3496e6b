#!/usr/bin/env bash
# The whole test suite: unit, property, conformance (against Lance's own resolver) and CLI tests.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
export LANCE_ACTIONS_PYTHON="$PWD/python/.venv/bin/python"
cargo test --workspace --locked "$@"
