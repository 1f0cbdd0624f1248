"""Start the training process and relay its progress; a crash there is an error here, no more."""
import asyncio
import json
import sys
from collections.abc import Callable
from pathlib import Path

from app.children import die_with_parent


class TrainingError(RuntimeError):
    pass


async def run_trainer(spec: dict, job_dir: Path, on_event: Callable[[dict], None]) -> dict:
    """Run `python -m app.training` on `spec`; returns its final "done" event.

    Cancelling the awaiting task kills the process. Its stderr goes to job_dir/train.log, whose
    tail is the error message when it fails.
    """
    job_dir.mkdir(parents=True, exist_ok=True)
    spec_path = job_dir / "spec.json"
    spec_path.write_text(json.dumps(spec, indent=1))
    log_path = job_dir / "train.log"
    with open(log_path, "wb") as log:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "app.training", str(spec_path),
            stdout=asyncio.subprocess.PIPE, stderr=log, preexec_fn=die_with_parent,
        )  # fmt: skip
    done = None
    try:
        async for line in proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue  # a library printing to stdout
            if event.get("event") == "done":
                done = event
            else:
                on_event(event)
        code = await proc.wait()
    except asyncio.CancelledError:
        proc.kill()
        await proc.wait()
        raise
    if code != 0 or done is None:
        tail = log_path.read_text(errors="replace")[-2000:]
        raise TrainingError(f"training process exited with code {code}:\n{tail}")
    return done
