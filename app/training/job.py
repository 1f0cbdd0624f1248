"""Start the training process and relay its progress; a crash there is an error here, no more."""

import asyncio
import json
import os
import shlex
import sys
from collections.abc import Callable
from pathlib import Path

from app.children import die_with_parent

# Tells the training process to die with its parent: under `accelerate launch` the parent is the
# launcher, whose workers run in sessions of their own and would outlive it.
SUPERVISED = "WHALE_TRAIN_SUPERVISED"
OPTIMIZER_FILE = "optimizer.pt"  # in a checkpoint: the AdamW state the next step continues


class TrainingError(RuntimeError):
    pass


def trainer_command(
    accelerate_config: Path | None = None, accelerate_args: str | None = None
) -> list[str]:
    """The command that starts the training process, less the spec: `python -m app.training`, or
    under `accelerate launch` (several processes, GPUs or machines) when a config or arguments
    for it are given (WHALE_TRAIN_ACCELERATE_CONFIG, WHALE_TRAIN_ACCELERATE_ARGS)."""
    if accelerate_config is None and not accelerate_args:
        return [sys.executable, "-m", "app.training"]
    config = ["--config_file", str(accelerate_config)] if accelerate_config else []
    return [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        *config,
        *shlex.split(accelerate_args or ""),
        "-m",
        "app.training",
    ]


async def run_trainer(
    spec: dict, job_dir: Path, on_event: Callable[[dict], None], command: list[str] | None = None
) -> dict:
    """Run `command` (default: `python -m app.training`) on `spec`; returns its "done" event.

    Cancelling the awaiting task kills the process. Its stderr goes to job_dir/train.log, which
    starts with the command line (what other machines of a multi-node training run too), and
    whose tail is the error message when it fails.
    """
    job_dir.mkdir(parents=True, exist_ok=True)
    spec_path = job_dir / "spec.json"
    spec_path.write_text(json.dumps(spec, indent=1))
    argv = [*(command or trainer_command()), str(spec_path)]
    log_path = job_dir / "train.log"
    with open(log_path, "wb") as log:
        log.write(f"$ {shlex.join(argv)}\n".encode())
        log.flush()
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdout=asyncio.subprocess.PIPE,
            stderr=log,
            preexec_fn=die_with_parent,
            env={**os.environ, SUPERVISED: "1"},
        )
    done = None
    try:
        async for line in proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue  # a library printing to stdout
            if not isinstance(event, dict):
                continue
            if event.get("event") == "done":
                done = event
            else:
                on_event(event)
        code = await proc.wait()
    except asyncio.CancelledError:
        proc.kill()  # the training processes of a launcher die with it (PDEATHSIG)
        await proc.wait()
        raise
    if code != 0 or done is None:
        tail = log_path.read_text(errors="replace")[-2000:]
        raise TrainingError(f"training process exited with code {code}:\n{tail}")
    return done
