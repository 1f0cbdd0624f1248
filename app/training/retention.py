"""Which trained checkpoints keep their weights on disk ([rft] keep_last, keep_every, max_disk_gb).

A full fine-tune's checkpoint is the whole model (a 4B model: about 8 GB), so a run of hundreds
of RFT steps cannot keep them all. After each step the weights folders of the run's trained
checkpoints that no rule keeps are deleted; their rows stay, marked `weights_dropped_at`, with
everything that refers to them (jobs, rollouts, lineage).

Always kept, whatever the budget: the checkpoints the run refers to (`weights_needed`, app/db/queries.py): a phase's
incoming and outgoing one, every one evaluated on the test split (so the run's best too), one an
unfinished evaluation samples from, and the newest (the one served and trained on next). Kept
while the disk budget allows: the newest `keep_last` and every `keep_every`th step's (the
release saves every 7 steps). Over `max_disk_gb` the latter go too, oldest first; still over,
the run pauses naming the folder, as a full disk pauses it (docs/faults.md).

The optimizer state saved with a checkpoint (`optimizer.pt`: AdamW's two moments, twice the
weights in float32) is read only by the step that starts from it, and the loop's next step starts
from the run's newest trained checkpoint; so under a policy only the newest keeps it, and a kept
checkpoint costs its weights alone (one promoted by hand trains on with a fresh AdamW).
"""

import logging
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from sqlmodel import Session, col, select

from app.db.queries import weights_needed
from app.db.schema import Checkpoint, TrainingJob, now
from app.experiment_schema import RFTConfig
from app.training.job import OPTIMIZER_FILE
from app.training.rft import pause_until_resumed

if TYPE_CHECKING:
    from app.workbench import Workbench

log = logging.getLogger(__name__)
GB = 1e9


class DiskBudgetExceeded(RuntimeError):
    """Over [rft] max_disk_gb with nothing left to drop, and no loop to pause."""


def _trained(s: Session, run_id: int, root: Path) -> list[tuple[Checkpoint, int]]:
    """The run's trained checkpoints that still have weights under `root`, oldest first, each
    with the RFT step that made it (0-based)."""
    rows = s.exec(
        select(Checkpoint, TrainingJob.step)
        .join(TrainingJob, TrainingJob.id == Checkpoint.training_job_id)
        .where(Checkpoint.run_id == run_id, col(Checkpoint.weights_dropped_at).is_(None))
        .order_by(Checkpoint.id)
    ).all()
    return [(c, step) for c, step in rows if c.path and Path(c.path).is_relative_to(root)]


def plan(
    s: Session, run_id: int, cfg: RFTConfig, rows: list[tuple[Checkpoint, int]]
) -> tuple[list[int], list[int]]:
    """(to drop now, droppable under the disk budget, oldest first) among the run's trained
    checkpoints with weights (`rows`, from `_trained`)."""
    hard = weights_needed(s, run_id)
    unneeded = [(c, step) for c, step in rows if c.id not in hard]
    if cfg.keep_last is None and cfg.keep_every is None:
        return [], [c.id for c, _ in unneeded]  # no count rule: only the budget drops
    newest = {c.id for c, _ in rows[-cfg.keep_last :]} if cfg.keep_last else set()
    # step s (0-based) is the release's global step s + 1, saved when a multiple of keep_every
    every = {c.id for c, step in rows if cfg.keep_every and (step + 1) % cfg.keep_every == 0}
    drop = [c.id for c, _ in unneeded if c.id not in newest | every]
    kept = [c.id for c, _ in unneeded if c.id in newest | every]
    return drop, kept


def disk_bytes(root: Path) -> int:
    """The bytes of the files under `root` (0 when absent); a file deleted while the folder is
    walked (a trainer or a retention pass at work beside the caller) counts as gone."""
    total = 0
    for path in root.rglob("*"):
        try:
            total += path.stat().st_size if path.is_file() else 0
        except FileNotFoundError:
            pass
    return total


async def _drop(workbench: "Workbench", checkpoint_ids: list[int]) -> None:
    """Mark the rows first, then delete the folders: a crash between leaves a marked row whose
    folder the next step deletes, never a live row without weights."""

    def mark(s):
        paths = []
        for checkpoint_id in checkpoint_ids:
            checkpoint = s.get(Checkpoint, checkpoint_id)
            checkpoint.weights_dropped_at = now()
            paths.append(checkpoint.path)
        return paths

    for path in await workbench.writer.run(mark):
        shutil.rmtree(path, ignore_errors=True)
    if checkpoint_ids:
        log.info("dropped the weights of checkpoints %s", checkpoint_ids)


def _leftovers(s: Session, run_id: int, root: Path) -> list[str]:
    """Folders of marked checkpoints that are still there (a crash after the mark)."""
    rows = s.exec(
        select(Checkpoint.path).where(
            Checkpoint.run_id == run_id, col(Checkpoint.weights_dropped_at).is_not(None)
        )
    ).all()
    return [p for p in rows if p and Path(p).is_relative_to(root) and Path(p).exists()]


def _drop_optimizers(trained: list[tuple[Checkpoint, int]]) -> None:
    """Delete the optimizer state of every trained checkpoint (`_trained`, oldest first) but the
    newest (the one the next step continues); the weights stay."""
    for checkpoint, _ in trained[:-1]:
        (Path(checkpoint.path) / OPTIMIZER_FILE).unlink(missing_ok=True)


async def retain(workbench: "Workbench", run_id: int, cfg: RFTConfig) -> list[int]:
    """Apply the retention rules after an RFT step; returns the checkpoints dropped. Over the
    disk budget with nothing left to drop, the run pauses until resumed (a single `whale
    train`, which nothing can pause, fails with DiskBudgetExceeded)."""
    if cfg.keep_last is None and cfg.keep_every is None and cfg.max_disk_gb is None:
        return []
    root = workbench.settings.home / "checkpoints"
    with workbench.session() as s:
        trained = _trained(s, run_id, root)
        drop, spare = plan(s, run_id, cfg, trained)
        for path in _leftovers(s, run_id, root):
            shutil.rmtree(path, ignore_errors=True)
        _drop_optimizers(trained)
    await _drop(workbench, drop)
    if cfg.max_disk_gb is None:
        return drop
    budget = cfg.max_disk_gb * GB
    over_budget = []
    with workbench.session() as s:  # measured: older rows' size_bytes may count an optimizer
        sizes = {c.id: disk_bytes(Path(c.path)) for c, _ in _trained(s, run_id, root)}
    used = disk_bytes(root)
    for checkpoint_id in spare:  # oldest first
        if used <= budget:
            break
        over_budget.append(checkpoint_id)
        used -= sizes.get(checkpoint_id, 0)
    await _drop(workbench, over_budget)
    used = disk_bytes(root)
    if used > budget:
        reason = (
            f"the disk budget is spent: {root} holds {used / GB:.2f} GB, over [rft] max_disk_gb "
            f"= {cfg.max_disk_gb:g}, and every checkpoint left there is needed or not this run's"
        )
        if not await pause_until_resumed(workbench, run_id, reason):
            raise DiskBudgetExceeded(reason)
    return drop + over_budget
