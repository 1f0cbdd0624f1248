#!/usr/bin/env bash
# Set up everything the workbench needs, idempotently: system packages, a Python environment
# cached outside the clone (keyed by pyproject.toml), and the project installed into it.
#   bash scripts/setup.sh          # to run the workbench
#   bash scripts/setup.sh --test   # also what the test suite needs (pytest, playwright, chromium)
# Afterwards .venv/bin/whale is the command line.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cache=${WHALE_CACHE:-$HOME/.cache/whale}
with_test=0
[[ ${1:-} == --test ]] && with_test=1

say() { printf '\033[1m[setup]\033[0m %s\n' "$*" >&2; }

# System packages: bubblewrap isolates the process sandbox, libseccomp builds the filter of both
# sandboxes. The tests also need chromium (browser
# tests), and the Docker engine with debootstrap (the docker sandbox and its offline image).
packages=()
command -v bwrap >/dev/null || packages+=(bubblewrap)
# libseccomp compiles the sandboxes' system-call filter (sandbox/seccomp.py)
ldconfig -p | grep 'libseccomp\.so\.2 ' >/dev/null || packages+=(libseccomp2)
if [[ $with_test == 1 ]]; then
    [[ -x /usr/bin/chromium ]] || packages+=(chromium)
    command -v dockerd >/dev/null || packages+=(docker.io)
    command -v debootstrap >/dev/null || packages+=(debootstrap)
    command -v docker-compose >/dev/null || packages+=(docker-compose)
fi
if ((${#packages[@]})); then
    say "installing ${packages[*]}"
    sudo_=""; [[ $(id -u) == 0 ]] || sudo_=sudo
    $sudo_ apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -qq "${packages[@]}" >/dev/null
fi

# The Python environment lives in the cache, named after what it was built from.
python=${PYTHON:-python3}
key=$( (cat "$repo/pyproject.toml"; "$python" --version; echo "test=$with_test") | sha256sum | cut -c1-16)
venv=$cache/venv-$key
if [[ ! -f $venv/.complete ]]; then
    say "building the Python environment in $venv (once per dependency set, a few minutes)"
    rm -rf "$venv"
    mkdir -p "$cache"
    "$python" -m venv "$venv"
    "$venv/bin/pip" install -q --upgrade pip setuptools
    # Dependencies only: the project itself is installed editable below, per clone.
    "$venv/bin/python" - "$repo/pyproject.toml" "$with_test" > "$venv/requirements.txt" <<'PY'
import sys, tomllib
project = tomllib.load(open(sys.argv[1], "rb"))["project"]
deps = list(project["dependencies"])
if sys.argv[2] == "1":
    deps += project["optional-dependencies"]["test"]
print("\n".join(deps))
PY
    "$venv/bin/pip" install -q -r "$venv/requirements.txt"
    touch "$venv/.complete"
fi
"$venv/bin/pip" install -q --no-deps --no-build-isolation -e "$repo" 2>&1 | grep -v '^WARNING: Location' >&2 || true
"$venv/bin/python" -c "import app.cli" # fail here, not later, if the install is broken
ln -sfn "$venv" "$repo/.venv"
say "ready: $repo/.venv/bin/whale"
