"""The `process` backend: runner servers as child processes under bubblewrap and rlimits.

Isolation: new network, pid, ipc, uts and user namespaces (no network but loopback), uid 65534
inside, no capabilities in rollouts (the runner server keeps CAP_SYS_ADMIN in the sandbox's own
user namespace, to give each rollout its own /tmp and its own network and IPC namespaces), no
further user namespaces (bubblewrap's --disable-userns), read-only binds of the system and
Python directories only, a private tmpfs /tmp and /dev/shm per rollout (sandbox/runner.py,
"mount"), a read-only /dev, an empty environment, rlimits (processes, file size, open files;
memory and CPU per rollout, set by the runner), and the seccomp filter of sandbox/seccomp.py,
which the runner loads. Weaker than the docker backend: no cgroup memory or pid accounting, and
the sandbox shares the invoking uid outside its namespace. Without bubblewrap only the filter,
the rlimits, the kills and the runner's Landlock scopes remain, and a warning says so; as root
that is refused, since a harness would then run as root on the host.
"""

import asyncio
import logging
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

from sandbox import seccomp
from sandbox.pool import CONTROL_SOCKET, SandboxUnavailable

log = logging.getLogger(__name__)
RUNNER = Path(__file__).with_name("runner.py")
MAX_EXTRA_PROCESSES = 256  # what one runner server and all its rollouts may add
ROOT_WITHOUT_BWRAP = (
    "bubblewrap is not installed and the workbench runs as root: a harness would run as root on "
    "this host with only rlimits around it. Install bubblewrap (apt-get install bubblewrap), "
    "use the docker backend, or run the workbench as an unprivileged user."
)
TMP_BYTES = 64 << 20  # the private /tmp lives in memory: cap it
# The host's system folders a bubblewrap sandbox shows (this backend's, and the coding agent's:
# sandbox/agent_sandbox.py): the toolchain under /usr and the /bin, /lib... beside it.
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")


def _python() -> str:
    return os.path.realpath(sys.executable)


def system_mounts() -> list[str]:
    """bwrap's arguments that show SYSTEM read-only, as the host has it: a link stays a link
    (merged /usr: /bin -> usr/bin), a folder is bound read-only, an absent one is left out."""
    args: list[str] = []
    for path in SYSTEM:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    return args


def _bwrap_args(
    harness: Path, gateway_socket: Path, control_dir: Path, disable_userns: bool
) -> list[str]:
    args = [
        # --as-pid-1: the runner is PID 1 and reaps; bubblewrap's own PID 1 would be a dumpable
        # process of the sandbox user, open to any rollout's ptrace or /proc/1/mem
        "bwrap",
        "--unshare-all",
        "--as-pid-1",
        "--die-with-parent",
        "--new-session",
        "--unshare-user",
        "--uid",
        "65534",
        "--gid",
        "65534",
        "--cap-drop",
        "ALL",
        # in the sandbox's own user namespace only: the runner server gives each rollout a new
        # mount namespace with its own /tmp and /dev/shm; each worker drops it (sandbox/runner.py)
        "--cap-add",
        "CAP_SYS_ADMIN",
        *(["--disable-userns"] if disable_userns else []),
        *system_mounts(),
        "--size",
        str(TMP_BYTES),
        "--tmpfs",
        "/tmp",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--remount-ro",
        "/dev",
        "--ro-bind",
        str(RUNNER),
        "/sandbox/runner.py",
        "--ro-bind",
        str(harness),
        "/sandbox/harness.py",
        "--ro-bind",
        str(seccomp.write(control_dir)),
        "/sandbox/seccomp.bpf",
        "--ro-bind",
        str(gateway_socket),
        "/gateway/gateway.sock",
        "--bind",
        str(control_dir),
        "/control",
        "--clearenv",
        "--setenv",
        "HOME",
        "/tmp",
        "--setenv",
        "PATH",
        "/usr/bin:/bin",
        "--setenv",
        "WHALE_GATEWAY",
        "/gateway/gateway.sock",
        "--ro-bind",
        str(seccomp.write(control_dir, seccomp.SERVER_CALLS["process"])),
        "/sandbox/seccomp-server.bpf",
        "--setenv",
        "WHALE_SECCOMP",
        "/sandbox/seccomp.bpf",
        "--setenv",
        "WHALE_SECCOMP_SERVER",
        "/sandbox/seccomp-server.bpf",
        "--setenv",
        "WHALE_SCRATCH",
        "mount",
        "--chdir",
        "/tmp",
    ]
    prefix = os.path.realpath(sys.base_prefix)
    if not prefix.startswith("/usr/"):  # e.g. a pyenv interpreter under /root
        args += ["--ro-bind", prefix, prefix]
    # bwrap's own root is a writable tmpfs; once every mount point exists, make it read-only.
    return args + ["--remount-ro", "/"]


def _own_processes() -> int:
    uid = os.getuid()
    return sum(1 for p in Path("/proc").iterdir() if p.name.isdigit() and _uid_of(p) == uid)


def _uid_of(proc_dir: Path) -> int | None:
    try:
        return proc_dir.stat().st_uid
    except OSError:
        return None


class ProcessLauncher:
    name = "process"

    def __init__(self, root_without_bwrap: bool = False):
        self.bwrap = shutil.which("bwrap") is not None
        # rlimits alone as root: only the sandbox tests ask for it (on throwaway machines)
        self.root_without_bwrap = root_without_bwrap
        # bubblewrap 0.8+ can forbid new user namespaces inside (the seccomp filter does too)
        self.disable_userns = (
            self.bwrap
            and "--disable-userns"
            in subprocess.run(["bwrap", "--help"], capture_output=True, text=True).stdout
        )
        self.refuse_root()
        if not self.bwrap:
            log.warning(
                "bubblewrap not found: the process sandbox runs with rlimits only (weak isolation)"
            )

    def refuse_root(self) -> None:
        if not self.bwrap and os.geteuid() == 0 and not self.root_without_bwrap:
            raise SandboxUnavailable(ROOT_WITHOUT_BWRAP)

    def command(
        self, harness: Path, gateway_socket: Path, control_dir: Path
    ) -> tuple[list[str], dict]:
        if self.bwrap:
            return _bwrap_args(harness, gateway_socket, control_dir, self.disable_userns) + [
                _python(),
                "-I",
                "-S",
                "/sandbox/runner.py",
                "serve",
                f"/control/{CONTROL_SOCKET}",
                "/sandbox/harness.py",
            ], {}
        env = {
            "WHALE_GATEWAY": str(gateway_socket),
            "HOME": "/tmp",
            "PATH": "/usr/bin:/bin",
            "WHALE_SECCOMP": str(seccomp.write(control_dir)),
            "WHALE_SCRATCH": "dir",  # a fresh working directory, HOME and TMPDIR, nothing more
        }
        return [
            _python(),
            "-I",
            "-S",
            str(RUNNER),
            "serve",
            str(control_dir / CONTROL_SOCKET),
            str(harness),
        ], env

    async def start(self, harness: Path, gateway_socket: Path, control_dir: Path):
        self.refuse_root()
        cmd, env = self.command(harness, gateway_socket, control_dir)
        # RLIMIT_NPROC counts every process of the real uid, sandboxed or not: allow what runs now
        # plus a bounded number more, so a fork bomb stops there.
        nproc = _own_processes() + MAX_EXTRA_PROCESSES

        def limits():
            resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
            resource.setrlimit(resource.RLIMIT_FSIZE, (16 << 20, 16 << 20))
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))

        log_file = open(control_dir / "server.log", "wb")
        proc = await asyncio.create_subprocess_exec(
            *cmd,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=env,
            preexec_fn=limits,
            start_new_session=True,
        )
        log_file.close()
        proc.log_path = control_dir / "server.log"
        return proc

    def exited(self, proc) -> str | None:
        if proc.returncode is None:
            return None
        tail = proc.log_path.read_text(errors="replace")[-1000:] if proc.log_path.exists() else ""
        return f"runner exited with code {proc.returncode}: {tail}".strip()

    def unavailable(self) -> str | None:
        return None  # a process starts as long as the host does

    async def stop(self, proc) -> None:
        if proc.returncode is None:
            try:
                os.killpg(proc.pid, 9)
            except ProcessLookupError:
                pass
        await proc.wait()
