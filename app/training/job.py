"""Start the training process and relay its progress; a crash there is an error here, no more."""

import asyncio
import json
import os
import shlex
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

from app.children import die_with_parent

# Tells the training process to die with its parent: under `accelerate launch` the parent is the
# launcher, whose workers run in sessions of their own and would outlive it.
SUPERVISED = "WHALE_TRAIN_SUPERVISED"
# In a trained checkpoint's folder (its `path`) beside the weights: the AdamW state the next
# step continues from. The trainer writes it, retention drops it, the checkpoint page shows it.
OPTIMIZER_FILE = "optimizer.pt"


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


class Trainer:
    """A training process kept up across the steps of a weight phase
    (`python -m app.training --serve FOLDER`): each step's spec goes to its inbox, its progress
    comes back on stdout. It holds the model and optimizer between steps, so a step costs no
    imports and no load from disk. A process that died (killed, out of memory, crashed) is
    started again by the next step, which then loads its start from the checkpoint on disk, as
    every step did before processes were kept.

    FOLDER/trainer.log is the process's stderr; each job's folder gets its own slice of it
    (train.log, starting with the command line) and the job's spec.json."""

    # after the stop request, then it is killed: time to write the optimizer's state (twice a
    # full fine-tune's weights) of the last step
    STOP_GRACE_S = 600.0

    def __init__(
        self, folder: Path, command: list[str] | None = None, env: dict[str, str] | None = None
    ):
        self.folder = folder
        self.command = command or trainer_command()
        self.env = env or {}  # more environment: the GPUs left to it (app/training/rft.py)
        self.log_path = folder / "trainer.log"
        self.proc: asyncio.subprocess.Process | None = None
        self.sent = 0  # steps written to the inbox of the running process

    @property
    def argv(self) -> list[str]:
        return [*self.command, "--serve", str(self.folder)]

    async def _start(self) -> None:
        inbox = self.folder / "inbox"
        shutil.rmtree(inbox, ignore_errors=True)
        inbox.mkdir(parents=True)
        self.sent = 0
        with open(self.log_path, "ab") as log:
            log.write(f"$ {shlex.join(self.argv)}\n".encode())
            log.flush()
            self.proc = await asyncio.create_subprocess_exec(
                *self.argv,
                stdout=asyncio.subprocess.PIPE,
                stderr=log,
                preexec_fn=die_with_parent,
                env={**os.environ, **self.env, SUPERVISED: "1"},
            )

    def _send(self, message: dict) -> None:
        self.sent += 1
        path = self.folder / "inbox" / f"{self.sent:06d}.json"
        tmp = path.with_suffix(".tmp")  # renamed whole: a reader never sees half a spec
        tmp.write_text(json.dumps(message))
        tmp.rename(path)

    async def step(self, spec: dict, job_dir: Path, on_event: Callable[[dict], None]) -> dict:
        """Train one step; returns its "done" event. Cancelling the awaiting task kills the
        process (the next step starts another)."""
        job_dir.mkdir(parents=True, exist_ok=True)
        self.folder.mkdir(parents=True, exist_ok=True)
        (job_dir / "spec.json").write_text(json.dumps(spec, indent=1))
        if self.proc is None or self.proc.returncode is not None:
            await self._start()
        offset = self.log_path.stat().st_size
        self._send(spec)
        done = None
        try:
            async for line in self.proc.stdout:
                try:
                    event = json.loads(line)
                except ValueError:
                    continue  # a library printing to stdout
                if not isinstance(event, dict):
                    continue
                if event.get("event") == "done":
                    done = event
                    break
                on_event(event)
            if done is None:  # stdout ended: the process is gone
                code = await self.proc.wait()
                tail = f"$ {shlex.join(self.argv)}\n{self._log_since(offset)[-2000:]}"
                raise TrainingError(f"training process exited with code {code}:\n{tail}")
        except asyncio.CancelledError:
            await self.kill()
            raise
        finally:
            text = f"$ {shlex.join(self.argv)}\n{self._log_since(offset)}"
            (job_dir / "train.log").write_text(text)
        return done

    def _log_since(self, offset: int) -> str:
        with open(self.log_path, "rb") as log:
            log.seek(offset)
            return log.read().decode(errors="replace")

    async def kill(self) -> None:
        if self.proc and self.proc.returncode is None:
            self.proc.kill()  # the training processes of a launcher die with it (PDEATHSIG)
            await self.proc.wait()

    async def close(self) -> None:
        """Ask the process to end (it ends the accelerator cleanly), then kill it if it lingers."""
        if self.proc is None or self.proc.returncode is not None:
            return
        self._send({"stop": True})
        try:
            await asyncio.wait_for(self.proc.wait(), self.STOP_GRACE_S)
        except TimeoutError:
            await self.kill()


async def run_trainer(
    spec: dict, job_dir: Path, on_event: Callable[[dict], None], command: list[str] | None = None
) -> dict:
    """One step in a process of its own, ended afterwards (the whole training of `spec`)."""
    trainer = Trainer(job_dir, command)
    try:
        return await trainer.step(spec, job_dir, on_event)
    finally:
        await trainer.close()
