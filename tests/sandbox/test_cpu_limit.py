"""A rollout killed by its CPU time limit is reported as that, not as a crash or a guess at
memory: the reason `cpu_limit` and an error naming the limit."""

import asyncio
import textwrap
import time

from sandbox.pool import Limits, SandboxPool

SPIN = """
def run(task, llm, tools):
    while True:
        pass
"""


def test_a_harness_past_its_cpu_time_is_killed_with_the_limit_named(
    tmp_path, short_dir, backend, make_launcher, gateway_socket
):
    harness = tmp_path / "harness.py"
    harness.write_text(textwrap.dedent(SPIN))
    harness.chmod(0o644)
    start = time.monotonic()

    async def main():
        pool = SandboxPool(
            make_launcher(backend), gateway_socket, short_dir / "sandboxes", Limits(wall_s=1)
        )
        try:
            # all of its time counted as waiting on the model: the harness-time limit never
            # fires, so only its CPU time (1 s + 5 s of slack) can end it
            waited = lambda: time.monotonic() - start  # noqa: E731
            return await pool.run(harness, {"question": "q"}, "token", waited=waited)
        finally:
            await pool.close()

    result = asyncio.run(main())

    assert result.reason == "cpu_limit", result.error
    assert result.error.startswith("CPU time limit of 6s exceeded")
    assert "out of memory" not in result.error
