#!/usr/bin/env bash
# The whole test suite: unit, property, conformance (against Lance's own resolver), commit-loop
# concurrency and fault, CLI and pylance-interop tests, then the Python package's pytest suite. Ends with
# one line totalling every test binary and pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
# Incremental caches only speed up edit-rebuild loops; a one-shot run would pay gigabytes of disk for them.
# Set before setup.sh, whose extension build then shares the workspace crates' artifacts.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
./scripts/setup.sh
export LANCE_ACTIONS_PYTHON="$PWD/python/.venv/bin/python"
# A full disk fails a build with a misleading compiler error: say how much room there is up front.
df -h . | awk 'NR == 2 { print "disk free before the build: " $4 }'
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
set +e
# --no-fail-fast: one failing binary must not hide the results of the others.
cargo test --workspace --locked --no-fail-fast "$@" 2>&1 | tee "$log"
rust_status=${PIPESTATUS[0]}
# The Python package's suite (python/tests), against the extension setup.sh just built.
pylog="$(mktemp)"
trap 'rm -f "$log" "$pylog"' EXIT
(cd python && "$LANCE_ACTIONS_PYTHON" -m pytest -p no:cacheprovider tests) 2>&1 | tee "$pylog"
py_status=${PIPESTATUS[0]}
set -e
# pytest's closing line: "== 38 passed, 1 failed, 2 errors in 41.2s ==" (errors count as failures).
read -r py_passed py_failed < <(awk '/^=+ .* in [0-9.]+s/ { p = 0; f = 0
    for (i = 2; i <= NF; i++) { if ($i ~ /^passed/) p = $(i-1); if ($i ~ /^(failed|errors?)/) f += $(i-1) } }
  END { printf "%d %d\n", p, f }' "$pylog")
awk -v pp="$py_passed" -v pf="$py_failed" \
  '/^test result:/ { for (i = 1; i < NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "tests: %d passed, %d failed\n", p + pp, f + pf }' "$log"
if [ "$py_status" = 5 ]; then echo "pytest collected no tests: python/tests must not be empty"; exit 1; fi
[ "$rust_status" = 0 ] && [ "$py_status" = 0 ]
