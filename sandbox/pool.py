"""Warm runner servers, pooled per harness, shared by every sandbox backend.

A backend's launcher starts one runner server (sandbox/runner.py in `serve` mode) inside its
isolation - a bubblewrap process or a Docker container - with the harness file and the gateway
socket bound in and a private control directory for the server's socket. Each rollout then costs
one connection and one fork inside the sandbox, never an interpreter or container start.
"""

import asyncio
import hashlib
import json
import logging
import math
import secrets
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from sandbox.runner import LIMITS_BYTES

log = logging.getLogger(__name__)
CONTROL_SOCKET = "runner.sock"
# With a harness clock (time waited on the gateway left out) the runner's own wall-clock limit
# is only a backstop, for a host that stopped watching: this much longer than the harness limit.
WAIT_BACKSTOP_S = 6 * 3600
# How long a retry waits for a backend that cannot start sandboxes (a Docker engine restarting).
BACKEND_WAIT_S = 300.0


class SandboxUnavailable(RuntimeError):
    """No backend can run harnesses safely here; the message says why and what to do."""


@dataclass(frozen=True)
class Limits:
    wall_s: float = 60.0  # per rollout: the harness's own time (see SandboxPool.run)
    memory_mb: int = 1024  # per rollout (address space); docker also caps each container
    output_bytes: int = 1 << 20  # bytes written straight to stdout/stderr (print() is captured)
    # Concurrent rollouts in one runner server. 16 measured faster than 8 or 32 on docker at 32
    # and 128 in flight: fewer containers to start, account and feed (docs/scaling.md).
    rollouts_per_server: int = 16
    start_s: float = 60.0  # how long a runner server may take to come up


@dataclass
class SandboxResult:
    answer: str | None
    reason: str | None  # None when the harness returned normally
    error: str | None
    stdout_tail: str = ""
    stderr_tail: str = ""
    wall_s: float = 0.0


class Launcher(Protocol):
    name: str

    async def start(self, harness: Path, gateway_socket: Path, control_dir: Path) -> Any: ...

    async def stop(self, handle: Any) -> None: ...

    def exited(self, handle: Any) -> str | None:
        """Why the server is gone (its log tail), or None while it runs."""

    def unavailable(self) -> str | None:
        """Why no server can be started now (the Docker engine does not answer), or None."""


@dataclass
class _Server:
    harness: Path
    control_dir: Path
    handle: Any = None
    in_flight: int = 0
    dead: bool = False
    lost_told: bool = False  # on_lost was told of it


@dataclass
class _HarnessServers:
    servers: list[_Server] = field(default_factory=list)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class SandboxPool:
    def __init__(
        self,
        launcher: Launcher,
        gateway_socket: Path,
        root: Path,
        limits: Limits = Limits(),
        warm: bool = True,
        starts: Any = None,
        on_lost: Callable[[str], None] | None = None,
    ):
        """`starts` is told each server that fails to start and each that starts (an
        app.faults.Outage: failed(why), back()); `on_lost` is told why, once per server, when
        one stops answering a rollout (killed, its engine gone, wedged)."""
        self.starts = starts
        self.on_lost = on_lost
        self.launcher = launcher
        self.name = launcher.name
        self.gateway_socket = gateway_socket
        self.limits = limits
        self.warm = warm  # False: a fresh server per rollout (the "cold" mode, for comparison)
        self._pools: dict[Path, _HarnessServers] = {}
        self._root = root  # control directories of the runner servers go here
        self._root.mkdir(mode=0o755, parents=True, exist_ok=True)

    async def run(
        self,
        harness: Path,
        task: dict,
        token: str,
        forbidden_modules: frozenset[str] = frozenset(),
        wall_s: float | None = None,
        sandbox_tools: dict[str, dict] | None = None,
        waited: Callable[[], float] | None = None,
    ) -> SandboxResult:
        """One rollout; `wall_s` overrides the pool's time limit for this one; `sandbox_tools`
        (name -> limits) are the domain's tools that run inside the sandbox.

        `waited` (seconds the rollout has waited on the gateway so far, from its grant) turns
        the limit into one on the harness's own time: wall clock minus the time its model and
        tool calls took to be answered, which depends on how busy the model server is, not on
        the harness. Without it the limit is on the wall clock."""
        start = time.monotonic()
        try:
            server = await (self._acquire(harness) if self.warm else self._start(harness))
        except Exception as exc:  # noqa: BLE001 - a sandbox that cannot start fails the rollout
            error = f"the sandbox did not start: {exc}"
            if self.starts:
                self.starts.failed(f"{self.name}: {error}")
            return SandboxResult(None, "sandbox_start", error, wall_s=time.monotonic() - start)
        try:
            return await self._call(
                server,
                task,
                token,
                forbidden_modules,
                start,
                wall_s or self.limits.wall_s,
                sandbox_tools or {},
                waited,
            )
        finally:
            server.in_flight -= 1
            if not self.warm or server.dead:
                await self._retire(server)

    async def backend_back(self, timeout: float = BACKEND_WAIT_S) -> None:
        """Wait, at most `timeout`, until the launcher can start servers again: a retry after a
        sandbox that did not start would otherwise fail the same way while a Docker engine
        restarts."""
        deadline = time.monotonic() + timeout
        why = await asyncio.to_thread(self.launcher.unavailable)
        if why is not None:
            log.warning(
                "the %s sandbox backend cannot start sandboxes (%s); waiting", self.name, why
            )
        while why is not None and time.monotonic() < deadline:
            await asyncio.sleep(1.0)
            why = await asyncio.to_thread(self.launcher.unavailable)

    async def _call(
        self,
        server: _Server,
        task: dict,
        token: str,
        forbidden: frozenset[str],
        start: float,
        wall_s: float,
        sandbox_tools: dict[str, dict],
        waited: Callable[[], float] | None,
    ) -> SandboxResult:
        # Two lines: the limits, read by the runner server, then what only the rollout's own
        # worker reads (its token never enters the server, see sandbox/runner.py).
        stop_key = secrets.token_hex(16)
        limits = {
            "wall_s": wall_s + WAIT_BACKSTOP_S if waited else wall_s,
            "cpu_s": math.ceil(wall_s) + 5,
            "output_bytes": self.limits.output_bytes,
            "stop": hashlib.sha256(stop_key.encode()).hexdigest()[:32],
        }
        request = {
            "task": task,
            "token": token,
            "memory_mb": self.limits.memory_mb,
            "forbidden_modules": sorted(forbidden),
            "sandbox_tools": sandbox_tools,
        }
        writer = None
        try:
            reader, writer = await asyncio.open_unix_connection(
                str(server.control_dir / CONTROL_SOCKET), limit=1 << 20
            )
            header = json.dumps(limits).ljust(LIMITS_BYTES - 1).encode() + b"\n"
            writer.write(header + json.dumps(request).encode() + b"\n")
            await writer.drain()
            if waited:
                harness_s, line = await self._watch(server, reader, wall_s, waited, stop_key)
            else:
                # The runner enforces the wall-clock limit itself; this is the backstop for a
                # runner that is itself wedged or killed.
                harness_s, line = None, await asyncio.wait_for(reader.readline(), wall_s + 15)
            if not line:
                raise ConnectionError("the runner closed the connection")
            result = json.loads(line)
            if result.get("reason") == "stopped" and harness_s is not None:
                result["reason"] = "timeout"
                result["error"] = (
                    f"harness time limit of {wall_s:g}s exceeded ({harness_s:.1f}s of the "
                    f"harness's own time, {waited():.1f}s more waiting on model and tool calls)"
                )
        except (TimeoutError, OSError, ConnectionError, ValueError) as exc:
            wedged = isinstance(exc, TimeoutError)
            # A dropped connection: look again before giving the runner more work, or every
            # rollout given to a dead one meanwhile would fail too.
            if not wedged and isinstance(exc, OSError):
                why = await self._gone(server)
            else:
                why = self.launcher.exited(server.handle) if server.handle is not None else None
            if why is not None or wedged:
                server.dead = True  # gone or wedged: no more work for it; it is replaced
            detail = f"{type(exc).__name__}: {exc}".rstrip(": ")
            if self.on_lost and not server.lost_told:  # once per server, however many it held
                server.lost_told = True
                self.on_lost(why or ("no answer in time (wedged)" if wedged else detail))
            return SandboxResult(
                None,
                "crash",
                f"the sandbox stopped answering ({detail})" + (f"; {why}" if why else ""),
                wall_s=time.monotonic() - start,
            )
        finally:
            if writer is not None:
                writer.close()
        return SandboxResult(
            result.get("answer"),
            result.get("reason"),
            result.get("error"),
            result.get("stdout_tail", ""),
            result.get("stderr_tail", ""),
            result.get("wall_s", time.monotonic() - start),
        )

    async def _watch(
        self,
        server: _Server,
        reader: asyncio.StreamReader,
        wall_s: float,
        waited: Callable[[], float],
        stop_key: str,
    ) -> tuple[float | None, bytes]:
        """The runner's answer, stopping the rollout once its harness time is up: (the harness
        time at the stop or None, the answer line)."""
        started = time.monotonic()
        answer = asyncio.ensure_future(reader.readline())
        try:
            while True:
                harness_s = time.monotonic() - started - waited()
                done, _ = await asyncio.wait({answer}, timeout=max(0.05, wall_s - harness_s))
                if done:
                    return None, answer.result()
                harness_s = time.monotonic() - started - waited()
                if harness_s >= wall_s:
                    break
            await self._send_stop(server, stop_key)
            # the backstop for a runner that is wedged or killed
            return harness_s, await asyncio.wait_for(answer, 15)
        finally:
            answer.cancel()

    async def _gone(self, server: _Server) -> str | None:
        """Why a runner that dropped a connection is gone, or None when it still serves. A
        killed container's processes die one by one (its listening socket can outlive the
        connection that broke) and docker records the exit late: look a few times over about
        a second before calling it alive."""
        for _ in range(5):
            why = self.launcher.exited(server.handle) if server.handle is not None else None
            if why is not None:
                return why
            if not await self._accepts(server):
                return "its runner server no longer accepts connections"
            await asyncio.sleep(0.2)
        return None

    async def _accepts(self, server: _Server) -> bool:
        """Whether the server's runner still takes connections (an empty one it just closes)."""
        try:
            _, writer = await asyncio.open_unix_connection(str(server.control_dir / CONTROL_SOCKET))
        except OSError:
            return False
        writer.close()
        return True

    async def _send_stop(self, server: _Server, stop_key: str) -> None:
        line = json.dumps({"stop_key": stop_key}).ljust(LIMITS_BYTES - 1).encode() + b"\n"
        _, writer = await asyncio.open_unix_connection(str(server.control_dir / CONTROL_SOCKET))
        try:
            writer.write(line)
            await writer.drain()
        finally:
            writer.close()

    async def prestart(self, harness: Path, rollouts: int) -> None:
        """Start, all at once, the servers `rollouts` concurrent rollouts of `harness` will need
        (one at a time on demand, a docker pool of 16 takes seconds longer to fill). A server
        that fails to start is left out; its rollouts then report why."""
        if not self.warm:
            return
        pool = self._pools.setdefault(harness, _HarnessServers())
        async with pool.lock:
            pool.servers = [s for s in pool.servers if not s.dead]
            missing = -(-rollouts // self.limits.rollouts_per_server) - len(pool.servers)
            started = await asyncio.gather(
                *(self._start(harness) for _ in range(missing)), return_exceptions=True
            )
            for server in started:
                if isinstance(server, _Server):
                    server.in_flight = 0
                    pool.servers.append(server)

    async def _acquire(self, harness: Path) -> _Server:
        pool = self._pools.setdefault(harness, _HarnessServers())
        async with pool.lock:
            pool.servers = [s for s in pool.servers if not s.dead]
            for server in pool.servers:
                if server.in_flight < self.limits.rollouts_per_server:
                    server.in_flight += 1
                    return server
            server = await self._start(harness)
            pool.servers.append(server)
            return server

    async def _start(self, harness: Path) -> _Server:
        control_dir = Path(tempfile.mkdtemp(prefix="ctl-", dir=self._root))
        server = _Server(harness, control_dir, in_flight=1)
        server.handle = await self.launcher.start(harness, self.gateway_socket, control_dir)
        sock = control_dir / CONTROL_SOCKET
        deadline = time.monotonic() + self.limits.start_s
        polls = 0
        while not sock.exists():
            polls += 1
            # Asking the launcher is slower (docker: a daemon call), so ask every 20th poll only.
            why = self.launcher.exited(server.handle) if polls % 20 == 0 else None
            if why is None and time.monotonic() > deadline:
                why = f"no runner socket after {self.limits.start_s:g}s"
            if why is not None:
                await self._retire(server)
                raise RuntimeError(why)
            await asyncio.sleep(0.01)
        if self.starts:
            self.starts.back()
        return server

    async def _retire(self, server: _Server) -> None:
        server.dead = True
        handle, server.handle = server.handle, None  # retire once, even when asked twice
        if handle is not None:
            try:
                await self.launcher.stop(handle)
            except Exception as exc:  # noqa: BLE001 - e.g. the Docker engine is restarting:
                # the rollout's result stands; its container is removed with the store's
                # leftovers when the workbench next starts
                log.warning("could not stop a sandbox (%s): %s", self.name, exc)
        shutil.rmtree(server.control_dir, ignore_errors=True)

    async def release(self, harness: Path) -> None:
        """Stop the warm servers of one harness (its evaluation is over)."""
        pool = self._pools.pop(harness, None)
        if pool:
            await asyncio.gather(*(self._retire(s) for s in pool.servers))

    async def close(self) -> None:
        for harness in list(self._pools):
            await self.release(harness)
        shutil.rmtree(self._root, ignore_errors=True)
