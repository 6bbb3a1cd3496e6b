#!/usr/bin/env bash
# The whole test suite: unit, property, conformance (against Lance's own resolver), commit-loop
# concurrency and fault, CLI and pylance-interop tests, then the Python package's pytest suite. Ends with
# each test binary's time and one line totalling every test binary, the doctests and pytest.
#
# The Rust tests run under cargo-nextest (.config/nextest.toml): every test in a process of its own,
# the tests of all binaries side by side; pytest runs beside them. Most of the suite waits on fsync,
# writer processes or moto rather than on a core, so on 2 cores this takes a fraction of running
# binary after binary. Doctests, which nextest does not run, run after with `cargo test --doc`.
set -euo pipefail
cd "$(dirname "$0")/.."
# Incremental caches only speed up edit-rebuild loops; a one-shot run would pay gigabytes of disk for them.
# Set before setup.sh, whose extension build then shares the workspace crates' artifacts.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
./scripts/setup.sh
export LANCE_ACTIONS_PYTHON="$PWD/python/.venv/bin/python"
# A full disk fails a build with a misleading compiler error: say how much room there is up front.
df -h . | awk 'NR == 2 { print "disk free before the build: " $4 }'
# nextest keeps its reports under the workspace's target/nextest (.config/nextest.toml `[store]`),
# wherever CARGO_TARGET_DIR puts the build.
junit="$PWD/target/nextest/default/junit.xml"
log="$(mktemp)"
pylog="$(mktemp)"
doclog="$(mktemp)"
trap 'rm -f "$log" "$pylog" "$doclog"' EXIT
# Build every test binary first, so that pytest (started next) does not compete with the compiler.
cargo nextest run --workspace --locked --no-run "$@"
# The model crate as a library user builds it: default features, without the `matrix` feature the
# workspace's CLI, Python package and tests switch on (its samples and matrix stay out of it).
cargo check -p lance-actions --lib --locked
# The tests' tables live in temporary directories (tempfile, pytest's tmp_path): put them in memory.
# On this machine kind's disk (ext4, mounted with `discard`) creating and removing a small file
# costs about 0.8 ms of kernel CPU (4,000 files: 3.2 s of system time and 12.6 s wall, against
# 0.08 s and 0.3 s on tmpfs), and the suite creates and removes a few hundred thousand (every
# commit writes a manifest and a transaction file; the conformance suite copies its sample table
# for every pair): in a perf profile of the conformance binary 55% of the samples were in the kernel,
# a third in ext4's inode allocator. Lance's local object store makes the same calls (write a temporary file, then rename or
# link it into place) on either file system, so the tests check the same thing. Set
# LANCE_ACTIONS_TEST_TMPDIR to choose another directory (an empty value keeps TMPDIR as it is).
tmp_root="${LANCE_ACTIONS_TEST_TMPDIR-/dev/shm}"
if [ -n "$tmp_root" ] && [ -d "$tmp_root" ] && [ -w "$tmp_root" ]; then
  TMPDIR="$(mktemp -d "$tmp_root/lance-actions-tests.XXXXXX")"
  export TMPDIR
  trap 'rm -f "$log" "$pylog" "$doclog"; rm -rf "$TMPDIR"' EXIT
  echo "test tables under $TMPDIR ($(df -h "$TMPDIR" | awk 'NR == 2 { print $4 }') free)"
fi
set +e
started=$(date +%s)
# The Python package's suite (python/tests), against the extension setup.sh just built, beside the
# Rust tests; its output is printed after theirs.
(cd python && "$LANCE_ACTIONS_PYTHON" -m pytest -p no:cacheprovider tests) >"$pylog" 2>&1 &
pytest_pid=$!
rm -f "$junit"
# --no-fail-fast: one failing test must not hide the results of the others.
cargo nextest run --workspace --locked --no-fail-fast "$@" 2>&1 | tee "$log"
rust_status=${PIPESTATUS[0]}
wait "$pytest_pid"
py_status=$?
cat "$pylog"
echo "Rust tests and pytest, side by side: $(( $(date +%s) - started )) s"
cargo test --doc --workspace --locked 2>&1 | tee "$doclog"
doc_status=${PIPESTATUS[0]}
set -e
# pytest's closing line: "== 38 passed, 1 failed, 2 errors in 41.2s ==" (errors count as failures).
read -r py_passed py_failed < <(awk '/^=+ .* in [0-9.]+s/ { p = 0; f = 0
    for (i = 2; i <= NF; i++) { if ($i ~ /^passed/) p = $(i-1); if ($i ~ /^(failed|errors?)/) f += $(i-1) } }
  END { printf "%d %d\n", p, f }' "$pylog")
# libtest's "test result: ok. 3 passed; 0 failed; ..." lines of the doctests.
read -r doc_passed doc_failed < <(awk '/^test result:/ { for (i = 1; i < NF; i++) {
    if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } } END { printf "%d %d\n", p, f }' "$doclog")
# nextest's JUnit report: each binary's tests, failures and summed test time, then the totals.
if [ -f "$junit" ]; then
  read -r rust_passed rust_failed < <("$LANCE_ACTIONS_PYTHON" scripts/junit_summary.py "$junit")
else
  echo "nextest wrote no JUnit report at $junit"
  rust_passed=0 rust_failed=1
fi
echo "tests: $(( rust_passed + doc_passed + py_passed )) passed, $(( rust_failed + doc_failed + py_failed )) failed"
if [ "$rust_passed" = 0 ]; then echo "nextest ran no test"; exit 1; fi
if [ "$py_status" = 5 ]; then echo "pytest collected no tests: python/tests must not be empty"; exit 1; fi
[ "$rust_status" = 0 ] && [ "$doc_status" = 0 ] && [ "$py_status" = 0 ]
