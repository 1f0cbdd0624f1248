"""A weight phase as `whale train` records it, written through the real writer: test mean@k
before, RFT steps (a sampling evaluation on the train split, accepted rollouts, a loss per batch,
a new LoRA checkpoint whose parent is the previous one), test mean@k after. And a loop run's
weight phases: the same steps, each phase a Phase row its jobs belong to.

Shared by tests/api and tests/web.
"""

from dataclasses import dataclass, field

from app.db.schema import Checkpoint, Evaluation, Harness, Metric, Phase, Run, TrainingJob
from tests.api.synthetic_store import Store

BATCHES = 4  # loss points of a trained step
TRACEBACK = "Traceback (most recent call last):\n  ...\ntorch.OutOfMemoryError: CUDA out of memory"
LOG = "loading /models/smol\n2 examples, 1 batch per epoch\n" + TRACEBACK


@dataclass
class WeightPhase:
    run: Run
    base: Checkpoint
    jobs: list[TrainingJob] = field(default_factory=list)
    checkpoints: list[Checkpoint] = field(default_factory=list)  # the trained ones, in order
    sampling: list[Evaluation] = field(default_factory=list)  # one per job
    tests: list[Evaluation] = field(default_factory=list)  # before, and after when it finished
    row: Phase | None = None  # the loop's phase row; None for `whale train`


def weight_phase(store: Store, steps: list[list[str]], last: str = "done") -> WeightPhase:
    """One RFT step per entry of `steps`, each the statuses of its sampled rollouts; a step with
    no "pass" is skipped. `last` is how the last step stands: "done", or still "sampling" or
    "training" (the run is running), or "failed" in training (the run failed)."""
    run_status = {"done": "done", "failed": "failed"}.get(last, "running")
    run = store.write(Run(name="rft seed.py", kind="rft", domain="arith", status=run_status))
    harness = store.harness(run)
    base = store.write(Checkpoint(name="smol-base", kind="base", path="/models/smol"))
    phase = WeightPhase(run, base)
    phase.tests.append(
        store.evaluation(
            run, harness, base, n_tasks=4, k=2, status="done", n_done=8, mean_at_k=0.25
        )
    )
    store.write(Metric(run_id=run.id, series="test/mean@k", x=0, rollouts=0, y=0.25))
    current, used = rft_steps(store, phase, harness, steps, last)
    if last == "done":
        phase.tests.append(
            store.evaluation(
                run, harness, current, n_tasks=4, k=2, status="done", n_done=8, mean_at_k=0.5
            )
        )
        store.write(Metric(run_id=run.id, series="test/mean@k", x=len(steps), rollouts=used, y=0.5))
    return phase


def rft_steps(
    store: Store,
    phase: WeightPhase,
    harness: Harness,
    steps: list[list[str]],
    last: str = "done",
    first_step: int = 0,
    used: int = 0,
) -> tuple[Checkpoint, int]:
    """The steps of `phase`, from its base checkpoint, numbered from `first_step` (a run counts
    its steps across phases); returns the checkpoint they end on and the rollouts used."""
    run, current = phase.run, phase.base
    phase_id = phase.row.id if phase.row else None
    for step, statuses in enumerate(steps, start=first_step):
        state = last if step == first_step + len(steps) - 1 else "done"
        job = store.write(
            TrainingJob(
                run_id=run.id,
                harness_id=harness.id,
                checkpoint_in_id=current.id,
                step=step,
                phase_id=phase_id,
                config={"threshold": 0.5, "lora": True},
            )
        )
        sampling = store.write(
            Evaluation(
                run_id=run.id,
                harness_id=harness.id,
                checkpoint_id=current.id,
                split="train",
                k=1,
                n_tasks=len(statuses),
                n_done=0 if state == "sampling" else len(statuses),
                status="running" if state == "sampling" else "done",
                phase_id=phase_id,
            )
        )
        phase.sampling.append(sampling)
        if state == "sampling":  # the job names its evaluation only once sampling ends
            phase.jobs.append(job)
            break
        store.rollouts(sampling, statuses)
        accepted, used = statuses.count("pass"), used + len(statuses)
        rate = accepted / len(statuses)
        values = dict(
            evaluation_id=sampling.id,
            n_rollouts=len(statuses),
            n_accepted=accepted,
            mean_reward=rate,
            n_examples=accepted,
            status="training" if accepted else "skipped",
        )
        store.write(
            *[
                Metric(
                    run_id=run.id,
                    training_job_id=job.id,
                    series=series,
                    x=step,
                    rollouts=used,
                    y=rate,
                )
                for series in ("train/accept_rate", "train/mean_reward")
            ]
        )
        if accepted:
            batches = BATCHES if state == "done" else BATCHES // 2
            store.write(
                *[
                    Metric(
                        run_id=run.id,
                        training_job_id=job.id,
                        series="train/loss",
                        x=step + b / BATCHES,
                        rollouts=used,
                        y=2 / (step + 1) - b / 10,
                    )
                    for b in range(1, batches + 1)
                ]
            )
        if accepted and state == "done":
            current = store.write(
                Checkpoint(
                    run_id=run.id,
                    parent_id=current.id,
                    kind="lora",
                    name=f"smol-rft-{job.id}",
                    path=f"/home/checkpoints/run-{run.id}/job-{job.id}",
                    training_job_id=job.id,
                    size_bytes=3_500_000,
                )
            )
            phase.checkpoints.append(current)
            values.update(
                status="done",
                checkpoint_out_id=current.id,
                loss=2 / (step + 1) - 0.25,
                tokens_trained=120 * accepted,
            )
        elif state == "failed":
            values.update(
                status="failed",
                log_tail=LOG,
                error=f"training process exited with code 1:\n{TRACEBACK}",
            )
        phase.jobs.append(_update(store, job, **values))
    return current, used


def loop_weight_phases(store: Store, phases: list[list[list[str]]]) -> list[WeightPhase]:
    """A finished loop run (strategy whale) with a weight phase per entry of `phases`, each its
    steps as `weight_phase` takes them, and a harness phase after each; rounds from 1."""
    run = store.write(
        Run(name="whale loop", kind="experiment", domain="arith", status="done", strategy="whale")
    )
    harness = store.harness(run)
    current = store.write(Checkpoint(name="smol-base", kind="base", path="/models/smol"))
    made, step, used = [], 0, 0
    for round_, steps in enumerate(phases, start=1):
        row = store.write(
            Phase(
                run_id=run.id,
                kind="weight",
                round=round_,
                harness_in_id=harness.id,
                checkpoint_in_id=current.id,
            )
        )
        phase = WeightPhase(run, current, row=row)
        current, used = rft_steps(store, phase, harness, steps, first_step=step, used=used)
        step += len(steps)
        store.write_values(
            row,
            status="done",
            ended_reason="fixed",
            harness_out_id=harness.id,
            checkpoint_out_id=current.id,
            rollouts=sum(len(s) for s in steps),
        )
        store.write(
            Phase(
                run_id=run.id,
                kind="harness",
                round=round_,
                status="done",
                ended_reason="patience",
                harness_in_id=harness.id,
                harness_out_id=harness.id,
                checkpoint_in_id=current.id,
                checkpoint_out_id=current.id,
            )
        )
        made.append(phase)
    return made


def _update(store: Store, job: TrainingJob, **values) -> TrainingJob:
    def update(s):
        row = s.get(TrainingJob, job.id)
        for key, value in values.items():
            setattr(row, key, value)
        s.flush()
        return row

    return store.writer.submit(update).result()
