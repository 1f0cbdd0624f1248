"""Orchestrator throughput: rollouts/s through the real evaluation path - scheduler (Evaluator),
sandbox (process backend, docker warm pool), gateway, reward and trace recording - against a
zero-latency OpenAI-compatible endpoint, at concurrency 1, 8, 32 and 128. Each concurrency is
also the evaluation's admission cap (what WHALE_CONCURRENCY sets in a run;
app/rollout/admission.py), so that many rollouts really are in flight; the table says the most
seen at once.

The baseline is the same harness called in-process: `run(task, llm, tools)` in a thread whose
`llm.chat` posts straight to the endpoint (no sandbox, no gateway, no database). Overhead is the
orchestrated p50 latency minus the baseline p50 at the same concurrency. Every mode, the
baseline too, is warmed up the same way first (64 rollouts at concurrency 32, not timed).

`--sandbox-only` measures the sandbox alone instead: one rollout at a time of a harness that
makes no call, on a warm runner, each in its fresh scratch space and namespaces
(sandbox/runner.py).

    python -m benchmarks.orchestrator [--rollouts N] [--modes process,docker] [--sandbox-only]
"""

import argparse
import asyncio
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from app.db import Writer, open_engine
from app.db.schema import Checkpoint, Harness, Run, sha_of
from app.domains import Task, get_domain
from app.gateway import Gateway
from app.llm.client import ChatEndpoint
from app.llm.local import free_port
from app.rollout.admission import Admission
from app.rollout.evaluate import Evaluator
from benchmarks.common import parse, percentile, report, start_zero_llm, table
from sandbox import docker as docker_backend
from sandbox import image
from sandbox.pool import SandboxPool
from sandbox.process import ProcessLauncher

HARNESS = """
def run(task, llm, tools):
    return llm.chat([{"role": "user", "content": task["question"]}], max_tokens=4).content
"""
CONCURRENCY = (1, 8, 32, 128)
WARM_UP = (64, 32)  # rollouts and concurrency of every mode's untimed first evaluation
NO_CALL = "def run(task, llm, tools):\n    return task['question']\n"


def tasks(n: int) -> list[Task]:
    return [Task(f"t{i}", {"question": f"What is {i} + 42 - {i}?"}, "42") for i in range(n)]


def in_process(url: str, n: int, concurrency: int) -> tuple[list[float], float, int]:
    """The harness run in threads of this process, its model call straight to the endpoint;
    third, the most runs seen in flight at once."""
    namespace: dict = {}
    exec(HARNESS, namespace)
    http = httpx.Client(base_url=url, limits=httpx.Limits(max_connections=concurrency))

    class LLM:
        def chat(self, messages, **sampling):
            data = http.post(
                "/chat/completions", json={"model": "zero", "messages": messages, **sampling}
            ).json()
            return type("Message", (), {"content": data["choices"][0]["message"]["content"]})

    in_flight, peak, lock = 0, 0, threading.Lock()

    def one(task: Task) -> float:
        nonlocal in_flight, peak
        with lock:
            in_flight += 1
            peak = max(peak, in_flight)
        start = time.perf_counter()
        assert namespace["run"](task.public, LLM(), None) == "42"
        took = time.perf_counter() - start
        with lock:
            in_flight -= 1
        return took

    start = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        latencies = list(pool.map(one, tasks(n)))
    wall = time.perf_counter() - start
    http.close()
    return latencies, wall, peak


async def orchestrated(
    evaluator: Evaluator, writer: Writer, n: int, concurrency: int
) -> tuple[list[float], float, float, int]:
    """n rollouts of one new evaluation through the Evaluator, `concurrency` of them in flight
    (the scheduler's and the admission's cap alike); per-rollout latency is the time from the
    scheduler starting a rollout to its row being recorded. The wall time starts with the first
    rollout: starting the pool's servers is timed apart (returned third). Fourth: the most
    rollouts the admission saw in flight at once."""
    evaluator.concurrency = concurrency
    evaluator.admission = Admission(concurrency)
    latencies: list[float] = []
    rollout = evaluator._rollout
    first_start = None

    async def timed(*args):
        nonlocal first_start
        start = time.perf_counter()
        first_start = first_start or start
        done = await rollout(*args)
        latencies.append(time.perf_counter() - start)
        assert done.status == "pass", (done.status, done.error)
        return done

    evaluator._rollout = timed
    code = HARNESS

    def create(s):
        run = Run(name="bench", kind="eval", domain="arith", status="running")
        s.add(run)
        s.flush()
        harness = Harness(run_id=run.id, name="one-call", code=code, sha=sha_of(code))
        checkpoint = Checkpoint(name=f"zero-{run.id}")
        s.add_all([harness, checkpoint])
        s.flush()
        return run, harness, checkpoint

    run, harness, checkpoint = await writer.run(create)
    start = time.perf_counter()
    evaluation = await evaluator.evaluate(
        run.id, harness, checkpoint, get_domain("arith"), "test", k=1, tasks=tasks(n)
    )
    end = time.perf_counter()
    assert evaluation.mean_at_k == 1.0
    return latencies, end - first_start, first_start - start, evaluator.admission.peak


async def sandbox_alone(pool: SandboxPool, work: Path, n: int) -> list[float]:
    """Seconds per rollout of the sandbox alone: a harness that makes no call, one rollout at a
    time on a warm runner server, from the pool's call to its answer."""
    harness = work / "no-call.py"
    harness.write_text(NO_CALL)
    harness.chmod(0o644)
    for _ in range(20):  # warm-up: the runner server starts
        await pool.run(harness, {"question": "warm"}, "token")
    latencies = []
    for i in range(n):
        start = time.perf_counter()
        result = await pool.run(harness, {"question": str(i)}, "token")
        latencies.append(time.perf_counter() - start)
        assert result.answer == str(i), (result.reason, result.error)
    await pool.release(harness)
    return latencies


async def sandbox_only(n: int, pools: dict[str, SandboxPool], work: Path) -> None:
    rows = []
    for name, pool in pools.items():
        latencies = await sandbox_alone(pool, work, n)
        p50, p95 = percentile(latencies, 50) * 1000, percentile(latencies, 95) * 1000
        print(f"{name:24} p50 {p50:6.2f} ms  p95 {p95:6.2f} ms", flush=True)
        rows.append([name, n, f"{p50:.2f}", f"{p95:.2f}"])
        await pool.close()
    report(
        "Sandbox alone: one rollout on a warm runner",
        table(["mode", "rollouts", "p50 ms", "p95 ms"], rows),
        "A harness that makes no call, one rollout at a time on a warm runner server, from the "
        "pool's call to its answer: the connection, the fork, the rollout's network and IPC "
        "namespaces and Landlock domain, its fresh scratch space (process: a mount namespace "
        "with new tmpfs /tmp and /dev/shm; docker: a uid and a private directory of its own, "
        "emptied by a cleaner afterwards) and the result. "
        "Produced by `python -m benchmarks.orchestrator --sandbox-only`.",
        replace=True,
    )


async def main(n: int, modes: list[str], only_sandbox: bool = False) -> None:
    work = Path(tempfile.mkdtemp(prefix="whale-bench-"))
    work.chmod(0o755)
    port = free_port()
    zero = start_zero_llm(port)
    url = f"http://127.0.0.1:{port}/v1"
    engine = open_engine(work / "bench.db")
    writer = Writer(engine)
    endpoint = ChatEndpoint(url, "zero")
    gateway = Gateway(writer, endpoint)
    sock = work / "gateway.sock"
    await gateway.start(sock)

    pools = {}
    if "process" in modes:
        pools["process, warm"] = SandboxPool(ProcessLauncher(), sock, work / "p")
    if "docker" in modes:
        why_not = docker_backend.engine_available()
        if why_not is None:
            launcher = docker_backend.DockerLauncher(image.build(), owner="benchmark")
            pools["docker, warm pool"] = SandboxPool(launcher, sock, work / "d")
        else:
            print(f"docker skipped: {why_not}")
    if only_sandbox:
        await gateway.stop()
        await endpoint.close()
        writer.close()
        zero.terminate()
        await sandbox_only(n, pools, work)
        return

    rows, baseline = [], {}
    await asyncio.to_thread(in_process, url, *WARM_UP)  # warm-up: connections, first threads
    for concurrency in CONCURRENCY:
        count = max(n, 2 * concurrency)
        latencies, wall, peak = await asyncio.to_thread(in_process, url, count, concurrency)
        baseline[concurrency] = (percentile(latencies, 50) * 1000, count / wall)
        rows.append(
            row("in-process (baseline)", concurrency, count, latencies, wall, 0, peak, baseline)
        )
    for name, pool in pools.items():
        evaluator = Evaluator(writer, gateway, pool, work / "harnesses")
        await orchestrated(evaluator, writer, *WARM_UP)  # warm-up: imports, first containers
        for concurrency in CONCURRENCY:
            count = max(n, 2 * concurrency)
            latencies, wall, start_up, peak = await orchestrated(
                evaluator, writer, count, concurrency
            )
            rows.append(row(name, concurrency, count, latencies, wall, start_up, peak, baseline))
        await pool.close()

    await gateway.stop()
    await endpoint.close()
    writer.close()
    zero.terminate()
    rows.sort(key=lambda r: (r[1], r[0] != "in-process (baseline)"))
    report(
        "Orchestrator throughput",
        table(
            [
                "mode",
                "concurrency",
                "most in flight",
                "rollouts",
                "p50 ms",
                "p95 ms",
                "p50 overhead ms",
                "rollouts/s",
                "rate vs in-process",
                "pool start s",
            ],
            rows,
        ),
        "One-call harness against a zero-latency OpenAI-compatible endpoint, through the whole "
        "evaluation path: Evaluator (pending rows, scheduling, reward, rollout row), sandbox, "
        "gateway (token, budget, step recorded by the single writer). The baseline runs the same "
        "harness in threads of one process, posting straight to the endpoint. Overhead = p50 "
        "minus the baseline p50 at the same concurrency. rollouts/s counts from the first "
        "rollout's start; starting the evaluation's runner servers (one per 16 rollouts in "
        "flight, all at once, stopped again when the evaluation ends) is the last column. "
        "Concurrency is both the scheduler's and the admission's cap (WHALE_CONCURRENCY in a "
        "run); most in flight: the most rollouts the admission held at once (the baseline: the "
        "most harness calls running at once in its threads). Every mode is warmed up first "
        f"by an untimed evaluation of {WARM_UP[0]} rollouts at concurrency {WARM_UP[1]}. "
        "Produced by "
        f"`python -m benchmarks.orchestrator --rollouts {n}`.",
        replace=True,
    )


def row(name, concurrency, count, latencies, wall, start_up, peak, baseline) -> list:
    p50, p95 = percentile(latencies, 50) * 1000, percentile(latencies, 95) * 1000
    base_p50, base_rate = baseline[concurrency]
    rate = count / wall
    print(
        f"{name:24} c={concurrency:<4} in flight {peak:<4} p50 {p50:7.1f} ms  {rate:6.0f}/s",
        flush=True,
    )
    return [
        name,
        concurrency,
        peak,
        count,
        f"{p50:.1f}",
        f"{p95:.1f}",
        f"{p50 - base_p50:+.1f}",
        f"{rate:.0f}",
        f"{rate / base_rate:.2f}",
        f"{start_up:.2f}",
    ]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=400, help="rollouts per measurement")
    parser.add_argument("--modes", default="process,docker", help="sandbox backends to measure")
    parser.add_argument("--sandbox-only", action="store_true", help="the sandbox alone")
    args = parse(parser)
    asyncio.run(main(args.rollouts, args.modes.split(","), args.sandbox_only))
