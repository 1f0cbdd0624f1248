"""A rollout killed by its CPU time limit is reported as that, not as a crash or a guess at
memory: the reason `cpu_limit` and an error naming the limit, also for a harness that ignores
SIGXCPU and while processes come and go by the thousand next door (the kernel counts the limit
in ticks, which then outrun the run time that wait4 reports)."""

import asyncio
import multiprocessing
import os
import textwrap
import time

from sandbox.pool import Limits, SandboxPool

SPIN = """
def run(task, llm, tools):
    while True:
        pass
"""
SPIN_IGNORING_SIGXCPU = """
import signal
def run(task, llm, tools):
    signal.signal(signal.SIGXCPU, signal.SIG_IGN)
    while True:
        pass
"""


def _run_harness(code, tmp_path, short_dir, launcher, gateway_socket):
    harness = tmp_path / "harness.py"
    harness.write_text(textwrap.dedent(code))
    harness.chmod(0o644)
    start = time.monotonic()

    async def main():
        pool = SandboxPool(launcher, gateway_socket, short_dir / "sandboxes", Limits(wall_s=1))
        try:
            # all of its time counted as waiting on the model: the harness-time limit never
            # fires, so only its CPU time (1 s + 5 s of slack) can end it
            waited = lambda: time.monotonic() - start  # noqa: E731
            return await pool.run(harness, {"question": "q"}, "token", waited=waited)
        finally:
            await pool.close()

    return asyncio.run(main())


def _assert_cpu_limit(result):
    assert result.reason == "cpu_limit", result.error
    assert result.error.startswith("CPU time limit of 6s exceeded")
    assert "out of memory" not in result.error


def test_a_harness_past_its_cpu_time_is_killed_with_the_limit_named(
    tmp_path, short_dir, backend, make_launcher, gateway_socket
):
    _assert_cpu_limit(
        _run_harness(SPIN, tmp_path, short_dir, make_launcher(backend), gateway_socket)
    )


def test_a_harness_that_ignores_sigxcpu_is_killed_at_the_hard_limit_with_the_limit_named(
    tmp_path, short_dir, make_launcher, gateway_socket
):
    launcher = make_launcher("process")
    _assert_cpu_limit(
        _run_harness(SPIN_IGNORING_SIGXCPU, tmp_path, short_dir, launcher, gateway_socket)
    )


def _fork_storm(stop):
    """Short-lived processes, one after another, as a fork bomb in another sandbox makes them."""
    while not stop.is_set():
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)


def test_the_cpu_limit_is_named_while_a_fork_storm_runs_beside_it(
    tmp_path, short_dir, make_launcher, gateway_socket
):
    stop = multiprocessing.Event()
    storms = [multiprocessing.Process(target=_fork_storm, args=(stop,)) for _ in range(2)]
    for storm in storms:
        storm.start()
    try:
        result = _run_harness(
            SPIN, tmp_path, short_dir, make_launcher("process-rlimits-only"), gateway_socket
        )
    finally:
        stop.set()
        for storm in storms:
            storm.join()
    _assert_cpu_limit(result)
