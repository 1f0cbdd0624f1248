"""Loop runs of every strategy as the loop records them, written through the real writer: test
points (an evaluation and a test/mean@k metric each), phases, and for the whale run a harness
lineage, a trained checkpoint, rollouts with steps and events, for the export."""

from dataclasses import dataclass

from app.db.schema import (
    Checkpoint,
    Evaluation,
    Event,
    Harness,
    Metric,
    Phase,
    Rollout,
    Run,
    SearchIteration,
    TrainingJob,
)
from tests.api.synthetic_store import Store

# (rollouts, weight_steps, wall_s, test mean@k) per test point
CURVES = {
    "whale": [
        (0, 0, 0, 0.25),
        (512, 1, 600, 0.5),
        (1024, 1, 1500, 0.75),
        (2048, 2, 3000, 0.75),
        (3072, 3, 4800, 0.7),
    ],
    "weight_only": [(0, 0, 0, 0.25), (1024, 2, 2000, 0.4), (2048, 4, 4000, 0.55)],
    "harness_only": [(0, 0, 0, 0.25), (800, 0, 1000, 0.6), (1600, 0, 2000, 0.6)],
    "stagewise": [],  # just started: no test point yet
}
TRAIN_ROLLOUTS = {"whale": 3200, "weight_only": 2304}  # a train/* metric past the last test
PHASE_ROLLOUTS = {"whale": [1536, 2000]}  # phases counted more than the metrics


@dataclass
class Experiments:
    runs: dict[str, Run]  # by strategy, plus "rft": a `whale train` run from before the loop
    harnesses: list[Harness]  # the whale run's lineage, origin (outside the run) first
    base: Checkpoint


def experiment(store: Store, strategy: str, base: Checkpoint, k: int = 4) -> Run:
    run = store.write(
        Run(
            name=f"arith {strategy}",
            kind="experiment",
            domain="arith",
            strategy=strategy,
            status="running" if not CURVES[strategy] else "done",
            config={"experiment": {"test": {"k": k, "limit": 2}}},
        )
    )
    harness = store.harness(run)
    for rollouts, steps, wall_s, y in CURVES[strategy]:
        evaluation = store.evaluation(
            run, harness, base, n_tasks=2, k=k, status="done", n_done=2 * k, mean_at_k=y
        )
        store.write(
            Metric(
                run_id=run.id,
                series="test/mean@k",
                x=rollouts,
                rollouts=rollouts,
                y=y,
                evaluation_id=evaluation.id,
                weight_steps=steps,
                wall_s=wall_s,
            )
        )
    if strategy in TRAIN_ROLLOUTS:
        store.write(
            Metric(
                run_id=run.id,
                series="train/accept_rate",
                x=9,
                y=0.99,
                rollouts=TRAIN_ROLLOUTS[strategy],
            )
        )
    return run


def rft_run(store: Store, base: Checkpoint) -> Run:
    """A `whale train` run: test points with neither weight_steps nor wall_s, x = RFT steps."""
    run = store.write(
        Run(name="rft seed.py", kind="rft", domain="arith", status="done", config={"test_k": 2})
    )
    harness = store.harness(run)
    for x, rollouts, y in [(0, 0, 0.1), (2, 64, 0.3)]:
        evaluation = store.evaluation(
            run, harness, base, n_tasks=2, k=2, status="done", mean_at_k=y
        )
        store.write(
            Metric(
                run_id=run.id,
                series="test/mean@k",
                x=x,
                rollouts=rollouts,
                y=y,
                evaluation_id=evaluation.id,
            )
        )
    return run


def with_steps(store: Store, rollouts: list[Rollout]) -> None:
    """Each rollout: model, tool, model; written out of order so that export must sort them."""
    messages = [{"role": "user", "content": "What is 1 + 1? Ünïcödé"}]
    for rollout in rollouts:
        store.model_step(rollout, 2, messages, "2", temperature=1.0)
        store.model_step(rollout, 0, messages, "let me compute")
        store.tool_step(rollout, 1, "calc", ["1+1"], result=2)


def lineage(store: Store, run: Run, phase: Phase) -> list[Harness]:
    origin = store.harness(None, name="origin.py", proposer="user")  # from outside the run
    seed = store.harness(run, name="arith seed.py", parent_id=origin.id, proposer="seed")
    child = store.harness(
        run,
        name="prompt-v1.py",
        code="PROMPT = 'v1'\n",
        parent_id=seed.id,
        proposer="knobs",
        phase_id=phase.id,
        iteration=1,
        axis="prompt",
        hypothesis="a terser prompt",
        changes="PROMPT",
    )
    broken = store.harness(
        run,
        name="broken/cand",
        code="def run(:\n",
        parent_id=child.id,
        parent_ids=[child.id, seed.id],
        proposer="llm",
        valid=False,
        error="SyntaxError: invalid syntax",
        phase_id=phase.id,
        iteration=1,
    )
    return [origin, seed, child, broken]


def experiments(store: Store) -> Experiments:
    base = store.write(Checkpoint(name="smol-base", kind="base", path="/models/smol"))
    runs = {strategy: experiment(store, strategy, base) for strategy in CURVES}
    runs["rft"] = rft_run(store, base)
    whale = runs["whale"]
    weight, search = store.write(
        Phase(
            run_id=whale.id,
            kind="weight",
            round=0,
            status="done",
            ended_reason="fixed",
            rollouts=PHASE_ROLLOUTS["whale"][0],
            checkpoint_in_id=base.id,
        ),
        Phase(
            run_id=whale.id,
            kind="harness",
            round=0,
            status="done",
            ended_reason="patience",
            rollouts=PHASE_ROLLOUTS["whale"][1],
        ),
    )
    harnesses = lineage(store, whale, search)
    job = store.write(
        TrainingJob(
            run_id=whale.id,
            harness_id=harnesses[1].id,
            phase_id=weight.id,
            checkpoint_in_id=base.id,
            step=0,
            status="done",
        )
    )
    lora = store.write(
        Checkpoint(
            run_id=whale.id,
            parent_id=base.id,
            kind="lora",
            name=f"smol-rft-{job.id}",
            path="/ckpt/job-1",
            training_job_id=job.id,
            size_bytes=3_500_000,
        )
    )
    store.write_values(weight, checkpoint_out_id=lora.id)
    store.write_values(search, harness_in_id=harnesses[1].id, harness_out_id=harnesses[2].id)
    store.write(
        SearchIteration(
            run_id=whale.id,
            phase_id=search.id,
            iteration=1,
            proposer="knobs",
            status="done",
            n_candidates=2,
            n_valid=1,
            best_harness_id=harnesses[2].id,
            best_success=0.5,
        )
    )
    store.write(
        Event(run_id=whale.id, kind="phase", detail={"phase": "weight", "round": 0}),
        Event(run_id=whale.id, kind="phase", detail={"phase": "harness", "round": 0}),
    )
    # The whale run's rollouts, with another run's in between: the export must skip those.
    sampling = store.write(
        Evaluation(
            run_id=whale.id,
            harness_id=harnesses[1].id,
            checkpoint_id=base.id,
            split="train",
            k=1,
            n_tasks=3,
        )
    )
    with_steps(store, store.rollouts(sampling, ["pass", "fail", "error"]))
    other = store.evaluation(runs["weight_only"], harnesses[1], base, n_tasks=1, k=2)
    with_steps(store, store.rollouts(other, ["pass", "pass"]))
    later = store.evaluation(whale, harnesses[2], lora, n_tasks=1, k=2)
    store.rollouts(later, ["timeout", "pass"])  # no steps
    return Experiments(runs, harnesses, base)
