"""Per-rollout sandbox overhead: a trivial harness (one model call) against a zero-latency
OpenAI-compatible endpoint, through the real gateway and trace recording.

Modes: in-process (the harness's one gateway call made directly, no sandbox: the baseline),
process backend (warm bubblewrap runner servers), docker cold (a new container per rollout),
docker warm pool. Prints p50/p95 latency and rollouts/s at concurrency 1, 8 and 32, and
appends the table to docs/benchmarks.md.

    python benchmarks/sandbox.py [--rollouts N]
"""
import argparse
import asyncio
import tempfile
import time
from pathlib import Path

import httpx

from app.db import Writer, open_engine
from app.db.schema import Checkpoint, Evaluation, Harness, Rollout, Run
from app.gateway import Gateway, Grant
from app.llm.client import ChatEndpoint
from app.llm.local import free_port
from benchmarks.common import percentile, report, start_zero_llm, table
from sandbox import docker as docker_backend
from sandbox import image
from sandbox.pool import Limits, SandboxPool
from sandbox.process import ProcessLauncher

HARNESS = '''
def run(task, llm, tools):
    return llm.chat([{"role": "user", "content": task["question"]}], max_tokens=4).content
'''
TASK = {"question": "What is 40 + 2?"}


def make_rollouts(writer: Writer, n: int) -> list[int]:
    def create(s):
        run = Run(name="bench", kind="eval", domain="arith")
        s.add(run)
        s.flush()
        harness, ckpt = Harness(run_id=run.id, name="h", code=HARNESS, sha="h"), Checkpoint(name="zero")
        s.add_all([harness, ckpt])
        s.flush()
        ev = Evaluation(run_id=run.id, harness_id=harness.id, checkpoint_id=ckpt.id, split="test",
                        k=1, n_tasks=n)  # fmt: skip
        s.add(ev)
        s.flush()
        rows = [Rollout(run_id=run.id, evaluation_id=ev.id, harness_id=harness.id,
                        checkpoint_id=ckpt.id, task_id=str(i), sample=0) for i in range(n)]  # fmt: skip
        s.add_all(rows)
        s.flush()
        return [r.id for r in rows]

    return writer.submit(create).result()


async def timed(one, ids: list[int], concurrency: int) -> tuple[list[float], float]:
    semaphore = asyncio.Semaphore(concurrency)
    latencies: list[float] = []

    async def go(rollout_id: int):
        async with semaphore:
            start = time.perf_counter()
            await one(rollout_id)
            latencies.append(time.perf_counter() - start)

    start = time.perf_counter()
    await asyncio.gather(*(go(i) for i in ids))
    return latencies, time.perf_counter() - start


async def main(n: int) -> None:
    work = Path(tempfile.mkdtemp(prefix="whale-bench-"))
    work.chmod(0o755)
    port = free_port()
    zero = start_zero_llm(port)
    engine = open_engine(work / "bench.db")
    writer = Writer(engine)
    endpoint = ChatEndpoint(f"http://127.0.0.1:{port}/v1", "zero")
    gateway = Gateway(writer, endpoint)
    sock = work / "gateway.sock"
    await gateway.start(sock)
    harness = work / "harness.py"
    harness.write_text(HARNESS)
    harness.chmod(0o644)

    client = httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(uds=str(sock)),
                               base_url="http://gw", timeout=60)  # fmt: skip

    async def in_process(rollout_id: int):
        token = gateway.grant(Grant(rollout_id, "zero"))
        r = await client.post("/v1/chat/completions", headers={"Authorization": f"Bearer {token}"},
                              json={"messages": [{"role": "user", "content": TASK["question"]}],
                                    "max_tokens": 4})  # fmt: skip
        assert r.json()["choices"][0]["message"]["content"] == "42"
        gateway.revoke(token)

    def sandboxed(pool: SandboxPool):
        async def one(rollout_id: int):
            token = gateway.grant(Grant(rollout_id, "zero"))
            result = await pool.run(harness, TASK, token)
            gateway.revoke(token)
            assert result.answer == "42", (result.reason, result.error)

        return one

    modes = {"in-process (baseline)": (in_process, None)}
    process_pool = SandboxPool(ProcessLauncher(), sock, work / "p", Limits(rollouts_per_server=32))
    modes["process, warm"] = (sandboxed(process_pool), process_pool)
    why_not = docker_backend.engine_available()
    if why_not is None:
        launcher = docker_backend.DockerLauncher(image.build(), owner="benchmark")
        cold = SandboxPool(launcher, sock, work / "dc", warm=False)
        warm = SandboxPool(launcher, sock, work / "dw", Limits(rollouts_per_server=32))
        modes["docker, cold (container per rollout)"] = (sandboxed(cold), cold)
        modes["docker, warm pool"] = (sandboxed(warm), warm)
    else:
        print(f"docker modes skipped: {why_not}")

    rows, baseline = [], {}
    for name, (one, pool) in modes.items():
        if pool is not None:  # warm it: start-up is paid once per evaluation, not per rollout
            await timed(one, make_rollouts(writer, 32), 32)
        for concurrency in (1, 8, 32):
            count = n if "cold" not in name else min(n, 2 * concurrency + 8)
            latencies, wall = await timed(one, make_rollouts(writer, count), concurrency)
            p50, p95 = percentile(latencies, 50) * 1000, percentile(latencies, 95) * 1000
            rate = count / wall
            if pool is None:
                baseline[concurrency] = (p50, rate)
            base_p50, base_rate = baseline[concurrency]
            rows.append([name, concurrency, count, f"{p50:.1f}", f"{p95:.1f}",
                         f"{p50 - base_p50:+.1f}", f"{rate:.0f}", f"{rate / base_rate:.2f}"])  # fmt: skip
            print(rows[-1])
        if pool is not None:
            await pool.close()

    await client.aclose()
    await gateway.stop()
    await endpoint.close()
    writer.close()
    zero.terminate()
    report(
        "Sandbox overhead per rollout",
        table(["mode", "concurrency", "rollouts", "p50 ms", "p95 ms", "p50 overhead ms",
               "rollouts/s", "rate vs baseline"], rows),  # fmt: skip
        "Trivial harness (one model call) against a zero-latency endpoint, through the real "
        "gateway and step recording. Overhead = p50 minus the in-process p50 at the same "
        "concurrency. Produced by `python benchmarks/sandbox.py`.",
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=200, help="rollouts per measurement")
    asyncio.run(main(parser.parse_args().rollouts))
