#!/usr/bin/env bash
# Install what the tests need, then run the whole suite. Extra arguments go to pytest.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
bash "$repo/scripts/setup.sh" --test
cd "$repo"
# The converted model is shared by every test store and every run on this machine.
export WHALE_MODEL_CACHE=${WHALE_MODEL_CACHE:-$HOME/.cache/whale/models}
exec .venv/bin/python -m pytest tests "$@"
