"""The coding agent's sandbox, probed from inside by an agent that tries to escape: it reads
nothing of the host's but its workspace and the toolchain, reaches no loopback or private
address, and reaches its allowed API host only through the egress proxy, which logs each
connection it refused."""

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from app.config import Settings
from app.experiment_schema import AgentProposerConfig, SearchConfig
from app.search import proposers
from app.search.agent import AgentProposer
from app.workbench import Workbench
from sandbox import egress_proxy
from sandbox.agent_sandbox import sandbox_python
from sandbox.egress_proxy import is_public, parse_allowed
from tests.conftest import MISSING, REPO

PROBE = Path(__file__).with_name("probe_agent.py")
ALLOWED = "api.allowed.test"  # resolved, in this test only, to the local server below
pytestmark = pytest.mark.xdist_group("agent")


class Hello(BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"hello from the allowed host"
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def private_listener():
    """(address, port) of an HTTP listener at a private address the host reaches: a network
    namespace of the test's own behind a veth pair, so that a direct probe from the agent's
    sandbox that comes back refused means the sandbox, not a missing route, refused it."""
    if os.geteuid() != 0 or not shutil.which("ip"):
        pytest.skip(MISSING + "root and iproute2 (a network namespace for a private listener)")
    name, host_end, ns_end = f"whale-probe-{os.getpid()}", f"wp{os.getpid()}h", f"wp{os.getpid()}n"
    address, port = "10.213.7.2", 8080

    def ip(*args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True)

    ip("netns", "add", name)
    listener = None
    try:
        ip("link", "add", host_end, "type", "veth", "peer", "name", ns_end)
        ip("link", "set", ns_end, "netns", name)
        ip("addr", "add", "10.213.7.1/30", "dev", host_end)
        ip("link", "set", host_end, "up")
        ip("-n", name, "addr", "add", f"{address}/30", "dev", ns_end)
        ip("-n", name, "link", "set", ns_end, "up")
        serve = ["ip", "netns", "exec", name, sys.executable, "-m", "http.server"]
        listener = subprocess.Popen(
            [*serve, str(port), "--bind", address],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 20
        while True:  # the host reaches it: the probe from the sandbox is meaningful
            try:
                socket.create_connection((address, port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the private listener never answered"
                time.sleep(0.2)
        yield address, port
    finally:
        if listener:
            listener.kill()
            listener.wait()
        subprocess.run(["ip", "link", "del", host_end], capture_output=True)
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


@pytest.fixture
def home_secret():
    """A file in the home folder of the user running the tests, which the agent must not read
    (a probe of whatever dotfile happens to be there reads nothing where there is none)."""
    path = Path.home() / ".whale-probe-secret"
    path.write_text("the host user's own file")
    yield path
    path.unlink(missing_ok=True)


@pytest.fixture
def local_server():
    """An HTTP server on the host's loopback: what a `whale serve` would be to the agent."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()


def test_an_agent_reaches_nothing_but_its_workspace_and_its_api_host(
    search, tmp_path, monkeypatch, local_server, private_listener, home_secret
):
    port = local_server
    private = list(private_listener)
    held_out = tmp_path / "held-out.jsonl"
    held_out.write_text('{"id": "test-1", "question": "secret"}\n')
    monkeypatch.setenv("WHALE_SEARCHQA_TEST", str(held_out))
    host_file = tmp_path / "host-secret.txt"
    host_file.write_text("a file of the host's")
    store = tmp_path / "home" / "whale.db"
    reads = [
        str(REPO / "data/math/test.jsonl"),
        str(REPO / "data/searchqa/test.jsonl"),
        str(held_out),
        str(store),
        str(REPO / "README.md"),  # /work, outside the workspace
        str(host_file),  # the host's /tmp
        "/etc/shadow",
        str(home_secret),  # the host user's home
    ]
    # The real resolver, except for one name pointed at the local server: the allowed host
    # this machine (with no network) cannot otherwise offer. Loopback stays refused for every
    # other name, which the probes below check.
    real = egress_proxy.resolve_public

    async def resolve(host, port):
        return ["127.0.0.1"] if host == ALLOWED else await real(host, port)

    monkeypatch.setattr(egress_proxy, "resolve_public", resolve)
    bin_dir = tmp_path / "agent-bin"
    bin_dir.mkdir()
    shutil.copy(PROBE, bin_dir / "probe.py")
    probes = {
        "read": reads,
        "direct": [["127.0.0.1", port], private],
        "proxy": [
            ["127.0.0.1", port],  # not allowed
            ["localhost", port],  # allowed, but a loopback address
            ["10.1.2.3", 443],  # allowed, but a private address
            ["169.254.169.254", 80],  # allowed, but link-local (cloud metadata)
            [ALLOWED, port],
        ],
    }
    (bin_dir / "probes.json").write_text(json.dumps(probes))
    cfg = SearchConfig(
        proposer="agent",
        candidates=1,
        tasks=1,
        proposer_timeout_s=120,
        agent={
            "command": [sandbox_python(), str(bin_dir / "probe.py"), str(bin_dir / "probes.json")],
            "read_paths": [str(bin_dir)],
            "allow_hosts": [
                f"localhost:{port}",
                "10.1.2.3",
                "169.254.169.254:80",
                f"{ALLOWED}:{port}",
            ],
        },
    )
    phase, stored, settings = search(cfg, iterations=1)
    workspace = settings.archive_dir / "runs" / str(phase.run_id)
    got = json.loads((workspace / "probe.json").read_text())

    for path in reads:
        assert Path(path).is_file(), (
            f"{path} should exist on the host for this probe to mean anything"
        )
        assert got["read"][path].startswith("refused"), (
            f"the agent read {path}: {got['read'][path]}"
        )
    for target, answer in got["direct"].items():
        assert answer.startswith("refused"), f"the agent reached {target} directly"
    through = got["proxy"]
    for target in (f"127.0.0.1:{port}", f"localhost:{port}", "10.1.2.3:443", "169.254.169.254:80"):
        assert through[target].startswith("HTTP/1.1 403"), f"the proxy let {target} through"
    assert "not an allowed host" in through[f"127.0.0.1:{port}"]
    assert "non-public address (127.0.0.1)" in through[f"localhost:{port}"]
    assert "non-public address (10.1.2.3)" in through["10.1.2.3:443"]
    assert through[f"{ALLOWED}:{port}"].endswith("hello from the allowed host")
    assert got["env"]["HTTPS_PROXY"] == got["env"]["ALL_PROXY"] == "http://127.0.0.1:3128"
    assert got["env"]["HOME"] == str(workspace / ".home")

    log = (workspace / f"agent-logs/iteration-{phase.id}-1.log").read_text()
    for target in (f"127.0.0.1:{port}", f"localhost:{port}", "10.1.2.3:443", "169.254.169.254:80"):
        assert f"refused CONNECT {target}: " in log
    assert f"CONNECT {ALLOWED}" not in log
    assert "its sandbox refused 4 connection(s)" in stored["iterations"][1].report


def test_no_network_means_no_proxy_either(tmp_path):
    cfg = AgentProposerConfig(command=["x"], network=False, allow_hosts=["api.example.com"])
    assert AgentProposer(cfg, tmp_path, 1000).allowed_hosts() is None
    # a command of one's own reaches nothing unless told; a preset, its API
    assert AgentProposer(AgentProposerConfig(command=["x"]), tmp_path, 1000).allowed_hosts() == []
    claude = AgentProposer(AgentProposerConfig(preset="claude-code"), tmp_path, 1000)
    assert claude.allowed_hosts() == ["api.anthropic.com"]


def test_only_public_addresses_pass_the_address_check():
    for address in ("8.8.8.8", "2606:4700::1111"):
        assert is_public(address)
    for address in (
        "127.0.0.1",
        "::1",
        "10.0.0.1",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",
        "100.64.0.1",
        "0.0.0.0",
        "224.0.0.1",
        "fe80::1",
        "fd00::1",
        "::ffff:127.0.0.1",  # IPv4-mapped
        "2002:7f00:1::1",  # 6to4 of 127.0.0.1
        "64:ff9b::a00:1",  # NAT64 of 10.0.0.1
    ):
        assert not is_public(address), address
    assert parse_allowed("API.example.com") == ("api.example.com", 443)
    assert parse_allowed("[2606:4700::1]:8443") == ("2606:4700::1", 8443)
    with pytest.raises(ValueError, match="not a host or host:port"):
        parse_allowed("example.com:http")


def test_the_proxy_refuses_plain_http_and_unknown_hosts(tmp_path):
    async def main():
        proxy = egress_proxy.EgressProxy(["api.example.com"])
        await proxy.start(tmp_path / "proxy.sock")
        answers = []
        for request in (
            b"GET http://api.example.com/ HTTP/1.1\r\nHost: api.example.com\r\n\r\n",
            b"CONNECT evil.example:443 HTTP/1.1\r\n\r\n",
        ):
            reader, writer = await asyncio.open_unix_connection(str(tmp_path / "proxy.sock"))
            writer.write(request)
            answers.append(await reader.read())
            writer.close()
        await proxy.close()
        return answers, proxy.refused

    (plain, unknown), refused = asyncio.run(main())
    assert plain.startswith(b"HTTP/1.1 405") and unknown.startswith(b"HTTP/1.1 403")
    assert refused == [
        "GET http://api.example.com/: only CONNECT (HTTPS) goes through this proxy",
        "CONNECT evil.example:443: not an allowed host (allowed: api.example.com:443)",
    ]


def test_the_claude_code_preset_runs_as_the_release_did(tmp_path):
    claude = AgentProposer(AgentProposerConfig(preset="claude-code"), tmp_path, 1000).command
    flags = " ".join(claude)
    assert "--model claude-opus-4-7" in flags and "--effort max" in flags
    assert "--tools Read,Write,Edit,Glob,Grep,Bash" in flags
    assert "--allowedTools Read,Write,Edit,Glob,Grep,Bash" in flags

    mine = AgentProposerConfig(
        preset="claude-code", model="claude-sonnet-4-6", effort="high", allowed_tools=["Read"]
    )
    flags = " ".join(AgentProposer(mine, tmp_path, 1000).command)
    assert "--model claude-sonnet-4-6" in flags and "--effort high" in flags
    assert "--tools Read --allowedTools Read" in flags and "Bash" not in flags

    workbench = Workbench(Settings(home=tmp_path / "home"), say=lambda _: None)
    release = SearchConfig(proposer="agent", agent={"preset": "claude-code"})
    assert proposers.proposer_timeout(release) == 2400
    # a run resumes from its stored config, every key given: the preset's limit still holds
    stored = SearchConfig.model_validate(release.model_dump(mode="json"))
    assert proposers.proposer_timeout(stored) == 2400
    own_limit = SearchConfig(
        proposer="agent", proposer_timeout_s=600, agent={"preset": "claude-code"}
    )
    assert proposers.proposer_timeout(own_limit) == 600
    assert proposers.proposer_timeout(SearchConfig(proposer="knobs")) == 1800
    codex = SearchConfig(proposer="agent", agent={"preset": "codex", "model": "gpt-5-codex"})
    assert "--model gpt-5-codex" in " ".join(proposers.agent(codex, workbench).command)
    with pytest.raises(ValueError, match="the codex preset has no tool list"):
        AgentProposer(AgentProposerConfig(preset="codex", allowed_tools=["Bash"]), tmp_path, 1)
