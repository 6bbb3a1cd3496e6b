#!/usr/bin/env bash
# The main job: build a small Lance dataset, race writers, print our verdicts next to Lance's.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
cargo run --quiet --locked -p lance-actions-cli -- demo "$@"
