#!/usr/bin/env bash
# The whole test suite: unit, property, conformance (against Lance's own resolver), commit-loop
# concurrency and fault, CLI and pylance-interop tests. Ends with one line totalling every test binary.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
export LANCE_ACTIONS_PYTHON="$PWD/python/.venv/bin/python"
# Incremental caches only speed up edit-rebuild loops; a one-shot run would pay gigabytes of disk for them.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
# A full disk fails a build with a misleading compiler error: say how much room there is up front.
df -h . | awk 'NR == 2 { print "disk free before the build: " $4 }'
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
cargo test --workspace --locked "$@" 2>&1 | tee "$log"
awk '/^test result:/ { for (i = 1; i < NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "tests: %d passed, %d failed\n", p, f }' "$log"
