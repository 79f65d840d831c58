#!/usr/bin/env bash
# Runs the whole test suite. Installs the external clients the contract tests drive
# (buf from npm, Python grpcio from PyPI) under .tools/ first; nothing else is needed.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-test-tools.sh
cargo test --locked "$@"
