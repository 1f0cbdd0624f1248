"""What a coding agent sees of the machine: the `agent` proposer's bubblewrap sandbox.

The agent reads raw traces (model output, retrieved passages), so text in a trace can instruct
it, and it has a shell. It is confined the way Claude Code's sandbox-runtime and Codex's
workspace-write mode confine theirs, by an allowlist rather than by hiding what is known secret:

- files: an empty root with, read-only, the system's toolchain (/usr and the /bin, /lib links),
  the few /etc files a toolchain reads (certificates, the loader's cache, resolver and time
  zone; a /etc/passwd of its own), the folder of the agent's own executable and the
  `read_paths` given; read-write, its workspace (its home, .home, and TMPDIR, .tmp, inside);
  a fresh /tmp, /dev and /proc (its own processes only). The store, the test split, the
  sandboxes' runtime folder, /root, /home, /work and the host's /tmp are simply not there, and
  are masked should a `read_paths` folder hold them.
- network: a namespace of its own, with only loopback; its one way out is the egress proxy
  (sandbox/egress_proxy.py), reached through a Unix socket bound into the sandbox by a small
  forwarder (sandbox/egress_forwarder.py) listening where HTTPS_PROXY points. The host's
  loopback services, its abstract Unix sockets (they belong to a network namespace) and its
  network are out of reach, whatever the agent's code does: a route that cannot exist needs
  no rule.
- processes: new PID, IPC and UTS namespaces, a new session (no terminal to inject into), no
  capabilities, killed with the workbench.
"""

import os
import shutil
import sys
import tempfile
from pathlib import Path

from sandbox.egress_proxy import EgressProxy
from sandbox.process import SYSTEM, system_mounts

# What toolchains read in /etc: TLS roots, the dynamic loader, name service and resolver
# settings, the time zone. Not the rest (ssh keys, shadow, private TLS keys, tokens...).
ETC = (
    "/etc/ssl/certs",
    "/etc/ssl/openssl.cnf",
    "/etc/ca-certificates",
    "/etc/ca-certificates.conf",
    "/etc/pki/tls/certs",
    "/etc/pki/ca-trust",
    "/etc/alternatives",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/nsswitch.conf",
    "/etc/host.conf",
    "/etc/hosts",
    "/etc/resolv.conf",
    "/etc/localtime",
    "/etc/timezone",
    "/etc/mime.types",
)
INSIDE = Path("/run/whale")  # where the forwarder and the proxy's socket appear in the sandbox
PROXY_PORT = 3128  # the forwarder's port on the sandbox's own loopback


def sandbox_python() -> str:
    """A Python the sandbox shows (for the forwarder): the system's, else the workbench's."""
    for path in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.access(path, os.X_OK):
            return path
    return os.path.realpath(sys._base_executable)


def _visible(path: Path, roots: list[Path]) -> bool:
    return any(path == root or root in path.parents for root in roots)


class AgentSandbox:
    """The sandbox of one agent run: `async with` starts its egress proxy (when it has network)
    and removes its private folder after; `wrap` turns the agent's argv into bwrap's."""

    def __init__(
        self,
        workspace: Path,
        hidden: list[Path],
        read_paths: list[Path],
        allow_hosts: list[str] | None,
    ):
        """allow_hosts: None cuts the network altogether; a list (maybe empty) is what the
        egress proxy lets through."""
        self.workspace = workspace
        self.home = workspace / ".home"
        self.hidden = [Path(os.path.realpath(p)) for p in hidden]
        self.read_paths = [Path(p) for p in read_paths]
        for path in self.read_paths:
            if not path.is_absolute() or not path.exists():
                raise ValueError(f"search.agent.read_paths: no such folder: {path}")
        self.proxy = EgressProxy(allow_hosts) if allow_hosts is not None else None
        self._private: Path | None = None

    @property
    def refused(self) -> list[str]:
        return self.proxy.refused if self.proxy else []

    async def __aenter__(self) -> "AgentSandbox":
        self._private = Path(tempfile.mkdtemp(prefix="whale-agent-"))  # mode 0700
        uid, gid = os.getuid(), os.getgid()
        (self._private / "passwd").write_text(f"agent:x:{uid}:{gid}:agent:{self.home}:/bin/sh\n")
        (self._private / "group").write_text(f"agent:x:{gid}:\n")
        (self._private / "egress").mkdir()
        if self.proxy:
            await self.proxy.start(self._private / "egress" / "proxy.sock")
        return self

    async def __aexit__(self, *exc) -> None:
        if self.proxy:
            await self.proxy.close()
        shutil.rmtree(self._private, ignore_errors=True)

    def env(self) -> dict[str, str]:
        """The variables the sandbox sets for the agent: its home, its TMPDIR, its proxy."""
        env = {"HOME": str(self.home), "TMPDIR": str(self.workspace / ".tmp")}
        if self.proxy:
            url = f"http://127.0.0.1:{PROXY_PORT}"
            for name in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY"):
                env[name] = env[name.lower()] = url
        return env

    def wrap(self, argv: list[str]) -> list[str]:
        """bwrap's argv running `argv` (its program resolved on the host's PATH) inside."""
        self.home.mkdir(exist_ok=True)
        (self.workspace / ".tmp").mkdir(exist_ok=True)
        program = Path(os.path.realpath(shutil.which(argv[0]) or argv[0]))
        readable = [*self._system(), *self.read_paths]
        wrapped = ["bwrap", *system_mounts()]
        for path in ETC:
            wrapped += ["--ro-bind-try", path, path]
        for path in ("passwd", "group"):
            wrapped += ["--ro-bind", str(self._private / path), f"/etc/{path}"]
        # before the folders below, which may lie in the host's /tmp
        wrapped += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
        if not _visible(program, readable):  # e.g. a CLI under ~/.local: its folder only
            wrapped += ["--ro-bind", str(program.parent), str(program.parent)]
            readable.append(program.parent)
        for path in self.read_paths:
            wrapped += ["--ro-bind", str(path), str(path)]
        # a store or a test split inside a folder shown read-only stays out of sight
        for path in self.hidden:
            if _visible(path, readable):
                wrapped += ["--tmpfs", str(path)] if path.is_dir() else []
                wrapped += ["--ro-bind", "/dev/null", str(path)] if path.is_file() else []
        wrapped += ["--bind", str(self.workspace), str(self.workspace)]
        command = [str(program), *argv[1:]]
        if self.proxy:
            python = sandbox_python()
            if not _visible(Path(python), readable):
                prefix = Path(python).parents[1]  # <prefix>/bin/python3: its install
                wrapped += ["--ro-bind", str(prefix), str(prefix)]
            forwarder = Path(__file__).with_name("egress_forwarder.py")
            wrapped += [
                "--ro-bind",
                str(forwarder),
                str(INSIDE / "forwarder.py"),
                "--ro-bind",
                str(self._private / "egress"),
                str(INSIDE / "egress"),
            ]
            command = [
                python,
                "-I",  # isolated: no user site, no PYTHON* variables
                str(INSIDE / "forwarder.py"),
                str(INSIDE / "egress" / "proxy.sock"),
                str(PROXY_PORT),
                "--",
                *command,
            ]
        wrapped += [
            "--unshare-all",  # user (where allowed), pid, net, ipc, uts, cgroup namespaces
            "--die-with-parent",
            "--new-session",
            "--cap-drop",
            "ALL",
            "--chdir",
            str(self.workspace),
            "--remount-ro",
            "/",
        ]
        return [*wrapped, "--", *command]

    @staticmethod
    def _system() -> list[Path]:
        return [Path(p) for p in SYSTEM if os.path.isdir(p) and not os.path.islink(p)]
