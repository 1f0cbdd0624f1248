"""Stands in for a coding agent that a trace talked into escaping: from inside the agent's
sandbox it tries every reach it must not have, and the one it must, and writes what each got to
probe.json in its workspace. Standard library only (it runs under the sandbox's Python).

argv: PROBES_JSON, a file with {"read": [paths], "direct": [[host, port]], "proxy": [[host,
port]]}; a proxied target that connects is sent `GET /` and its answer recorded.
"""

import json
import os
import socket
import sys
from pathlib import Path
from urllib.parse import urlsplit

probes = json.loads(Path(sys.argv[1]).read_text())
got = {"read": {}, "direct": {}, "proxy": {}, "env": dict(os.environ)}

for path in probes["read"]:
    try:
        got["read"][path] = "read: " + Path(path).read_bytes()[:60].decode(errors="replace")
    except OSError as exc:
        got["read"][path] = f"refused: {exc}"

for host, port in probes["direct"]:
    try:
        socket.create_connection((host, port), timeout=5).close()
        got["direct"][f"{host}:{port}"] = "connected"
    except OSError as exc:
        got["direct"][f"{host}:{port}"] = f"refused: {exc}"

proxy = urlsplit(os.environ.get("HTTPS_PROXY", ""))
for host, port in probes["proxy"]:
    if not proxy.hostname:
        got["proxy"][f"{host}:{port}"] = "no proxy given"
        continue
    with socket.create_connection((proxy.hostname, proxy.port), timeout=10) as s:
        s.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
        answer = s.recv(4096).decode(errors="replace")
        if answer.startswith("HTTP/1.1 200"):
            s.sendall(f"GET / HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
            answer = b"".join(iter(lambda: s.recv(4096), b"")).decode(errors="replace")
        got["proxy"][f"{host}:{port}"] = answer

Path("probe.json").write_text(json.dumps(got, indent=1))
