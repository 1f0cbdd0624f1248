"""Rollouts in flight together in one warm runner, on every backend, rlimits-only included:
what each may still reach of the others is what docs/sandboxes.md says, and no more."""

import asyncio
import json
import textwrap

import pytest

from sandbox.pool import Limits, SandboxPool
from tests.sandbox.test_attacks import MEET, RENDEZVOUS, _landlock_abi

ROLLOUTS = 4
HARNESS = (
    RENDEZVOUS
    + MEET
    + textwrap.dedent(f"""
    def run(task, llm, tools):
        siblings = all_up({ROLLOUTS}, wait_s=20)
        tried = {{"abstract": bind_or_connect(socket.AF_UNIX, NAME, "abstract"),
                  "signal": signal_each(siblings)}}
        all_done(siblings, wait_s=20)
        return json.dumps({{"met": met, "tried": tried, "siblings": len(siblings)}})
""")
)


def test_abstract_sockets_and_signals_reach_no_sibling(
    backend, make_launcher, gateway_socket, short_dir, tmp_path
):
    """Every backend keeps a rollout's abstract Unix sockets and signals to itself: namespaces
    and uids where bubblewrap or docker make them, a Landlock domain per rollout without them
    (Linux 6.12+)."""
    abi = _landlock_abi()
    if backend != "docker" and abi < 6:
        pytest.skip(f"Landlock ABI {abi}: no scope for signals or abstract sockets (documented)")
    harness = tmp_path / "meet.py"
    harness.write_text(HARNESS)
    harness.chmod(0o644)

    async def main():
        pool = SandboxPool(
            make_launcher(backend), gateway_socket, short_dir / "sandboxes", Limits(wall_s=60)
        )
        try:
            await pool.prestart(harness, ROLLOUTS)
            return await asyncio.gather(
                *(pool.run(harness, {"question": str(i)}, f"token{i}") for i in range(ROLLOUTS))
            )
        finally:
            await pool.close()

    results = asyncio.run(main())
    assert [r.reason for r in results] == [None] * ROLLOUTS, [r.error for r in results]
    reports = [json.loads(r.answer) for r in results]
    assert [r["siblings"] for r in reports] == [ROLLOUTS - 1] * ROLLOUTS, reports
    assert [r["met"] for r in reports] == [[]] * ROLLOUTS, f"{backend}: {reports}"
    # without a network namespace of its own (rlimits only) the name is taken: Landlock refuses
    assert {r["tried"]["abstract"] for r in reports} <= {"bound", "connect EPERM"}, reports
    assert {s for r in reports for s in r["tried"]["signal"]} == {"EPERM"}, reports
