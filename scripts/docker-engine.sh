#!/usr/bin/env bash
# Start the Docker engine if none answers; print the pid of the dockerd started here (nothing if
# one was already running), so the caller can stop exactly what it started.
set -euo pipefail
docker info >/dev/null 2>&1 && exit 0
log=${WHALE_CACHE:-$HOME/.cache/whale}/dockerd.log
mkdir -p "$(dirname "$log")"
dockerd >"$log" 2>&1 &
pid=$!
for _ in $(seq 60); do
    if docker info >/dev/null 2>&1; then
        echo "$pid"
        exit 0
    fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.5
done
echo "the Docker engine did not start; see $log" >&2
tail -20 "$log" >&2
exit 1
