#!/usr/bin/env bash
# The README's test command: installs what the tests need and this machine lacks
# (scripts/setup.sh), then runs the whole suite: every test binary, whatever an earlier one
# found (`--no-fail-fast`), so one failure hides no other. Arguments go to `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec cargo test --workspace --locked --no-fail-fast "$@"
