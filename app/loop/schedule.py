"""What an experiment's settings come to in the units the paper reads them in, for
`whale run FILE --dry-run`: the turns a harness may take (its own MAX_TURNS within the run's
clamp), the epochs of the training split each weight phase and the whole run go through, and
the SFT mini-batch one optimizer step really holds. A mismatch with the paper (one epoch where
it runs four) shows here at a glance, before anything runs (docs/paper.md)."""

from pathlib import Path

from app.experiment_schema import Experiment
from app.harness_code import declared_turns

# Rows of the training split each paper domain runs on in the release (docs/paper.md): NQ +
# HotpotQA train (docs/data.md of krafton-ai/WHALE), DAPO-Math-17K de-duplicated, and the
# Lichess train bucket. The dry run gives epochs at these sizes beside those of the split found.
PAPER_TRAIN_ROWS = {"searchqa": 18_946, "math": 17_917, "chess": 16_384}


def schedule(experiment: Experiment, settings, train_rows: int, harness_code: str | None) -> dict:
    """The turn budget, epochs and effective batch of the run `experiment` describes."""
    return {
        "turns": turn_budget(experiment, settings, harness_code),
        "epochs": epochs(experiment, train_rows),
        "batch": effective_batch(experiment, settings),
    }


def turn_budget(experiment: Experiment, settings, harness_code: str | None) -> dict:
    """The incoming harness's own turn limit, the run's clamp, what holds, and the RFT
    response window that follows from it."""
    clamp = experiment.rollout.max_calls or settings.rollout_max_calls
    declared = declared_turns(harness_code) if harness_code is not None else None
    turns = min(declared, clamp) if declared else clamp
    rft = experiment.rft
    window = None
    if rft.max_seq_len is not None:
        window = rft.max_seq_len + rft.max_seq_len_per_turn * turns
    return {
        "harness_max_turns": declared,  # None: declares none, the clamp is its budget
        "clamp": clamp,
        "turns": turns,
        "max_seq_len": window,  # per example, at these turns (None: the rollout token budget)
    }


def _phase_steps(experiment: Experiment) -> tuple[int, int] | None:
    """(fewest, most) RFT steps of one weight phase; None when the run has no weight phase."""
    if experiment.strategy == "harness_only":
        return None
    s = experiment.switching
    if s.rule == "fixed":
        return s.weight_steps_per_phase, s.weight_steps_per_phase
    return max(s.weight_burn_in, 1), s.weight_max_steps


def _run_steps(experiment: Experiment) -> int | None:
    if experiment.strategy == "harness_only":
        return 0
    return experiment.budget.weight_steps  # None: decided by a rollout budget as the run goes


def epochs(experiment: Experiment, train_rows: int) -> dict:
    """Epochs of the training split per weight phase and per run: steps x prompts per step /
    rows, on the split found and, for a paper domain, at the release's size."""
    prompts = experiment.rft.prompts_per_step
    phase, run = _phase_steps(experiment), _run_steps(experiment)

    def at(rows: int) -> dict:
        per = (lambda steps: round(steps * prompts / rows, 3)) if rows else (lambda _: None)
        return {
            "rows": rows,
            "steps_per_epoch": round(rows / prompts, 2),
            "per_weight_phase": None if phase is None else [per(phase[0]), per(phase[1])],
            "per_run": None if run is None else per(run),
        }

    out = {"prompts_per_step": prompts, "split_found": at(train_rows)}
    paper = PAPER_TRAIN_ROWS.get(experiment.domain)
    if paper:
        out["paper_size"] = at(paper)
    return out


def training_processes(settings) -> int:
    """Data-parallel training processes: the accelerate config's num_processes, else one."""
    import shlex

    from app.llm.vllm import flag_value

    given = flag_value(shlex.split(settings.train_accelerate_args or ""), "--num_processes")
    if given and given.isdigit() and int(given) > 0:  # the launch arguments win over the file
        return int(given)
    path: Path | None = settings.train_accelerate_config
    if path is None:
        return 1
    import yaml

    try:
        config = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError):
        return 1  # `whale run` itself names a config it cannot read
    n = config.get("num_processes") if isinstance(config, dict) else None
    return n if isinstance(n, int) and n > 0 else 1


def effective_batch(experiment: Experiment, settings) -> dict:
    """What one optimizer step trains on: batch_size over all processes (scope global) or per
    data-parallel process (scope rank, verl's meaning), in the batch_unit."""
    rft = experiment.rft
    processes = training_processes(settings)
    per_step = rft.batch_size * (processes if rft.batch_scope == "rank" else 1)
    return {
        "batch_size": rft.batch_size,
        "scope": rft.batch_scope,
        "unit": rft.batch_unit,
        "training_processes": processes,
        "per_optimizer_step": per_step,
    }
