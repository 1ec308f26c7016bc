#!/usr/bin/env bash
# Run a bootstrap node with the settings in bootstrap/bootstrap.toml (from the repository root).
# Extra flags are passed through, e.g. `bootstrap/run.sh --announce-host 203.0.113.7`.
set -euo pipefail
cd "$(dirname "$0")/.."
exec "${P2P_GUARD:-.venv/bin/p2p-guard}" bootstrap --config bootstrap/bootstrap.toml "$@"
