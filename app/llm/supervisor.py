"""A model server launched by the workbench (the local server, vLLM) as a supervised child.

It runs in its own process group (vLLM forks an engine and workers), and a watcher thread starts
it again when it dies: a crash then costs the rollouts in flight one more try (the evaluator
waits for the server to be back before it tries again, app/rollout/evaluate.py), not the run.
A server that keeps dying (more than MAX_CRASHES times in CRASH_WINDOW seconds) stays down and
says so. Each crash, restart and giving up is also told to `on_event`, which the workbench
records in the log of every run it was serving.
"""

import asyncio
import logging
import os
import shlex
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx

log = logging.getLogger(__name__)


def free_port() -> int:
    """A loopback TCP port nobody listens on right now (for a server we are about to start)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def how_it_ended(returncode: int) -> str:
    """'was killed by SIGKILL' or 'exited with code 3'."""
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with code {returncode}"


class SupervisedServer:
    """A subclass says how to run its server (`command`, `env`) and what makes it ready beyond
    answering /health (`_ready`); this class starts, watches, restarts and stops it."""

    NAME = "the model server"  # how messages name it
    ERROR: type[Exception] = RuntimeError  # what a failed start raises
    MAX_CRASHES = 3  # within CRASH_WINDOW seconds; past that it stays down and says so
    CRASH_WINDOW = 600
    TERM_WAIT_S = 30  # after SIGTERM, before SIGKILL

    def __init__(self, log_path: Path, port: int | None = None, say=log.info):
        self.log_path = log_path
        self.port = port or free_port()
        self.say = say
        self.on_restart: Callable[[], None] | None = None  # after a crash restart (watcher thread)
        self.on_event: Callable[[str, dict], None] | None = None  # crash, restart, giving up
        self.proc: subprocess.Popen | None = None
        self.restarts = 0
        self.gave_up: str | None = None
        self.timeout = 600.0
        self._lock = threading.Lock()  # one (re)start at a time
        self._stopping = threading.Event()
        self._up = threading.Event()  # ready, and not seen dead since
        self._watcher: threading.Thread | None = None
        self._crashes: list[float] = []

    # --- what a subclass supplies --------------------------------------------------------

    def command(self) -> list[str]:
        raise NotImplementedError

    def env(self) -> dict[str, str]:
        return dict(os.environ)

    def _preexec(self) -> None:
        """Run in the child before it starts (e.g. to die with the workbench)."""

    def _ready(self, deadline: float) -> None:
        """Once /health answers: anything more the server needs before it serves (raise ERROR)."""

    # --- the shared part -----------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self, timeout: float = 600) -> None:
        """Start it and wait until it is ready; then watch it. Raises ERROR."""
        self.timeout = timeout
        with self._lock:
            self._spawn()
            self._wait_ready(timeout)
        self._watcher = threading.Thread(target=self._watch, name="server-watcher", daemon=True)
        self._watcher.start()

    def restart(self) -> None:
        """Stop and start again; raises ERROR."""
        with self._lock:
            self._terminate()
            self._spawn()
            self._wait_ready(self.timeout)

    def stop(self) -> None:
        self._stopping.set()
        self._terminate()  # also ends a start the watcher may be waiting on
        if self._watcher:
            self._watcher.join(timeout=30)
        with self._lock:
            self._terminate()

    def is_up(self) -> bool:
        return self._up.is_set() and self.proc is not None and self.proc.poll() is None

    async def until_up(self) -> None:
        """Return once the server serves, or will not (stopped, given up on, never started
        here); meanwhile it is dead or being restarted, and a request would only fail."""
        deadline = time.monotonic() + self.timeout + 60
        while not self.is_up() and time.monotonic() < deadline:
            if self._watcher is None or self._stopping.is_set() or self.gave_up:
                return
            await asyncio.sleep(0.25)

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def _spawn(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        cmd = self.command()
        with open(self.log_path, "ab") as log_file:
            log_file.write(f"\n=== {time.strftime('%F %T')} {shlex.join(cmd)}\n".encode())
            log_file.flush()
            self.proc = subprocess.Popen(
                cmd,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=self.env(),
                start_new_session=True,
                preexec_fn=self._preexec,
            )

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        health = self.base_url.removesuffix("/v1") + "/health"
        while time.monotonic() < deadline:
            if self._stopping.is_set():
                raise self.ERROR(f"{self.NAME} was stopped while starting")
            if self.proc.poll() is not None:
                self._terminate()
                raise self.ERROR(
                    f"{self.NAME} {how_it_ended(self.proc.returncode)} before it became "
                    f"healthy; the end of {self.log_path}:\n{self.log_tail()}"
                )
            try:
                if httpx.get(health, timeout=2).status_code == 200:
                    self._ready(deadline)
                    self._up.set()
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self._terminate()
        raise self.ERROR(
            f"{self.NAME} did not become healthy within {timeout:.0f}s; the end of "
            f"{self.log_path}:\n{self.log_tail()}"
        )

    def _terminate(self) -> None:
        """End the server's whole process group: politely, then for good."""
        self._up.clear()
        proc = self.proc
        if proc is None:
            return
        for sig, wait in ((signal.SIGTERM, self.TERM_WAIT_S), (signal.SIGKILL, 10)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(wait)
            except subprocess.TimeoutExpired:
                continue
            if sig == signal.SIGTERM:  # the server is gone; its engine processes may linger
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            break

    def _tell(self, kind: str, detail: dict) -> None:
        if self.on_event:
            try:
                self.on_event(kind, detail)
            except Exception:  # noqa: BLE001 - telling must never stop the watching
                log.exception("recording %s failed", kind)

    def _watch(self) -> None:
        while not self._stopping.wait(1.0):
            with self._lock:
                if self._stopping.is_set() or self.proc.poll() is None:
                    continue
                self._up.clear()
                ended = how_it_ended(self.proc.returncode)
                now = time.monotonic()
                self._crashes = [t for t in self._crashes if now - t < self.CRASH_WINDOW] + [now]
                if len(self._crashes) > self.MAX_CRASHES:
                    self.gave_up = (
                        f"{self.NAME} {ended}: {len(self._crashes)} crashes in "
                        f"{self.CRASH_WINDOW}s; not restarting it again (see {self.log_path})"
                    )
                    self.say(self.gave_up)
                    self._tell("model_server_gave_up", {"why": self.gave_up})
                    return
                why = f"{self.NAME} {ended}; restarting it (log: {self.log_path})"
                self.say(why)
                self._tell("model_server_exited", {"why": why, "pid": self.proc.pid})
                self._terminate()
                try:
                    self._spawn()
                    self._wait_ready(self.timeout)
                except self.ERROR as exc:
                    self.say(str(exc))
                    continue  # counted as the next crash on the next turn
                self.restarts += 1
                self._tell(
                    "model_server_restarted",
                    {"pid": self.proc.pid, "down_s": round(time.monotonic() - now, 1)},
                )
            if self.on_restart:
                self.on_restart()
