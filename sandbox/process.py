"""The `process` sandbox backend: a child process under bubblewrap (when installed) and rlimits.

Isolation: no network (new network namespace), read-only system binds, a private tmpfs /tmp,
a private pid namespace, no capabilities, uid 65534, an empty environment, rlimits always.
Weaker than the docker backend (no cgroup memory or pid limits); without bubblewrap only the
rlimits and the wall-clock kill remain, and a warning says so.
"""
import asyncio
import json
import logging
import os
import resource
import shutil
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from sandbox.runner import RESULT_MARKER

log = logging.getLogger(__name__)
RUNNER = Path(__file__).with_name("runner.py")


@dataclass(frozen=True)
class Limits:
    wall_s: float = 60.0
    memory_mb: int = 1024
    output_bytes: int = 1 << 20  # stdout + stderr the harness may write past its print() capture
    file_mb: int = 16


@dataclass
class SandboxResult:
    answer: str | None
    reason: str | None  # None when the harness returned normally
    error: str | None
    stdout_tail: str = ""
    stderr_tail: str = ""
    wall_s: float = 0.0


def _python() -> str:
    return os.path.realpath(sys.executable)


def _bwrap_args(harness: Path, gateway_dir: Path) -> list[str]:
    args = [
        "bwrap", "--unshare-all", "--die-with-parent", "--new-session",
        "--unshare-user", "--uid", "65534", "--gid", "65534", "--cap-drop", "ALL",
        "--ro-bind", "/usr", "/usr",
        "--tmpfs", "/tmp", "--proc", "/proc", "--dev", "/dev",
        "--ro-bind", str(RUNNER), "/sandbox/runner.py",
        "--ro-bind", str(harness), "/sandbox/harness.py",
        "--bind", str(gateway_dir), "/gateway",
        "--clearenv", "--setenv", "HOME", "/tmp", "--setenv", "PATH", "/usr/bin:/bin",
        "--chdir", "/tmp",
    ]  # fmt: skip
    for link in ("bin", "lib", "lib64", "sbin"):
        target = Path("/") / link
        if target.is_symlink():
            args += ["--symlink", os.readlink(target), f"/{link}"]
        elif target.exists():
            args += ["--ro-bind", str(target), f"/{link}"]
    prefix = os.path.realpath(sys.base_prefix)
    if not prefix.startswith("/usr"):  # e.g. a pyenv interpreter under /root
        args += ["--ro-bind", prefix, prefix]
    return args


class ProcessSandbox:
    name = "process"

    def __init__(self, limits: Limits = Limits()):
        self.limits = limits
        self.bwrap = shutil.which("bwrap") is not None
        if not self.bwrap:
            log.warning("bubblewrap not found: process sandbox runs with rlimits only (weak isolation)")

    def _set_limits(self) -> None:
        mem = self.limits.memory_mb << 20
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        cpu = int(self.limits.wall_s) + 5
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
        fsize = self.limits.file_mb << 20
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))

    def command(
        self, harness: Path, gateway_socket: Path, token: str
    ) -> tuple[list[str], dict[str, str]]:
        """The command line and environment that run `harness` under this sandbox."""
        if self.bwrap:
            cmd = _bwrap_args(harness, gateway_socket.parent) + [
                "--setenv", "WHALE_GATEWAY", f"/gateway/{gateway_socket.name}",
                "--setenv", "WHALE_TOKEN", token,
                _python(), "-I", "-S", "/sandbox/runner.py", "/sandbox/harness.py",
            ]  # fmt: skip
            return cmd, {}
        env = {"WHALE_GATEWAY": str(gateway_socket), "WHALE_TOKEN": token, "HOME": "/tmp"}
        return [_python(), "-I", "-S", str(RUNNER), str(harness)], env

    async def run(
        self, harness: Path, task: dict, gateway_socket: Path, token: str
    ) -> SandboxResult:
        cmd, env = self.command(harness, gateway_socket, token)
        start = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            *cmd,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            preexec_fn=self._set_limits,
            start_new_session=True,
        )
        try:
            out, err, over = await asyncio.wait_for(
                self._communicate(proc, json.dumps(task).encode()), self.limits.wall_s
            )
        except asyncio.TimeoutError:
            _kill(proc)
            await proc.wait()
            return SandboxResult(
                None, "timeout", f"wall-clock limit of {self.limits.wall_s:g}s exceeded",
                wall_s=time.monotonic() - start,
            )  # fmt: skip
        finally:
            _kill(proc)
        wall = time.monotonic() - start
        stdout, stderr = out.decode(errors="replace"), err.decode(errors="replace")
        if over:
            return SandboxResult(
                None, "output_limit",
                f"output limit of {self.limits.output_bytes} bytes exceeded",
                stdout[-4000:], stderr[-4000:], wall,
            )  # fmt: skip
        head, marker, tail = stdout.rpartition(RESULT_MARKER)
        if not marker:
            code = proc.returncode
            why = f"killed by signal {-code}" if code and code < 0 else f"exit code {code}"
            hint = " (memory limit?)" if code in (-signal.SIGKILL, 1) else ""
            return SandboxResult(
                None, "crash", f"sandbox ended without a result: {why}{hint}",
                stdout[-4000:], stderr[-4000:], wall,
            )  # fmt: skip
        result = json.loads(tail)
        return SandboxResult(
            result["answer"], result["reason"], result["error"],
            (head + result["stdout_tail"])[-4000:], (stderr + result["stderr_tail"])[-4000:], wall,
        )  # fmt: skip

    async def _communicate(self, proc, stdin: bytes) -> tuple[bytes, bytes, bool]:
        """Like communicate(), but stops reading (and reports) past the output limit."""
        proc.stdin.write(stdin)
        await proc.stdin.drain()
        proc.stdin.close()
        budget = [self.limits.output_bytes]
        over = asyncio.Event()

        async def pump(stream) -> bytes:
            chunks = []
            while chunk := await stream.read(65536):
                budget[0] -= len(chunk)
                if budget[0] < 0:
                    over.set()
                    _kill(proc)
                    break
                chunks.append(chunk)
            return b"".join(chunks)

        out, err = await asyncio.gather(pump(proc.stdout), pump(proc.stderr))
        await proc.wait()
        return out, err, over.is_set()


def _kill(proc) -> None:
    if proc.returncode is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
