"""A rehearsal (`whale run FILE --rehearse`): the experiment's whole loop at CPU size, keeping
every code path the file selects, so the parts of a paper run meet here before they meet on a
GPU (docs/loop.md, "Rehearsal").

What stays: the strategy and its switching rule, the backend (vLLM: its CPU build on the demo
model), LoRA or a full fine-tune with the kept trainer and the in-place weight update, the
optimizer_state, retention, the batch unit, fixed decoding, the scoring and test layout, the
proposer, and for a coding-agent preset its command line, sandbox and output reader. What
shrinks, said before it starts (`shrink`): the model, sizes and lengths, to two RFT steps per
weight phase, one proposing iteration of one candidate, two weight phases and one harness
phase, a handful of tasks per split. The agent preset's CLI is replaced by a stand-in that reads
its workspace and writes one candidate and the preset's own output format (`STAND_IN`).
"""

import os
import stat
import tempfile
from pathlib import Path

from app.db.schema import Evaluation
from app.experiment_schema import Experiment

STEPS = 2  # RFT steps per weight phase
TASKS = 4  # tasks of the harness and test splits
MAX_MODEL_LEN = 2048  # the demo model's context on vLLM's CPU build
CALL_TOKENS = 96  # completion tokens per model call
ROLLOUT_TOKENS = 192  # completion tokens per rollout
PROPOSER_TOKENS = 512  # completion tokens of the llm/gepa proposer on the run's own server

# The stand-in for `claude -p ... --output-format json`: run where the preset runs its CLI
# (cwd: the workspace), it copies accepted.py to one candidate with its notes and a report, and
# prints one result object as Claude Code does.
STAND_IN = '''#!/usr/bin/env python3
"""Stand-in for the claude CLI in a rehearsal: one candidate, the preset's output format."""
import json, pathlib, re, sys
root = pathlib.Path.cwd()
prompt = " ".join(sys.argv[1:])
iteration = (re.findall(r"iteration (\\d+)", prompt) or ["0"])[0]
code = (root / "accepted.py").read_text()
(root / "candidates").mkdir(exist_ok=True)
(root / "candidates" / "rehearsal.py").write_text(code + "\\n# rehearsal: unchanged\\n")
(root / "candidates" / "rehearsal.json").write_text(json.dumps({"notes": "rehearsal copy"}))
print(json.dumps({"type": "result", "subtype": "success", "is_error": False,
                  "result": "wrote candidates/rehearsal.py (iteration " + iteration + ")",
                  "total_cost_usd": 0.0,
                  "usage": {"input_tokens": 1000, "output_tokens": 100,
                            "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}))
'''


def shrink(experiment: Experiment) -> tuple[Experiment, list[str]]:
    """The experiment at CPU size, and what changed, one line each."""
    exp = experiment.model_copy(deep=True)
    changed: list[str] = []

    def put(section, key: str, value, label: str) -> None:
        old = getattr(section, key)
        if old != value:
            setattr(section, key, value)
            changed.append(f"{label}.{key}: {old} -> {value}")

    exp.name = f"{experiment.name} (rehearsal)"
    exp.seeds = None
    rft, sw, search, test = exp.rft, exp.switching, exp.search, exp.test
    if exp.runtime.llm_model is not None:
        changed.append(f"runtime.llm_model: {exp.runtime.llm_model} -> the demo model")
        exp.runtime.llm_model = None
    put(exp.runtime, "vllm_max_model_len", MAX_MODEL_LEN, "runtime")
    put(rft, "prompts_per_step", 2, "rft")
    put(rft, "samples_per_prompt", 2, "rft")
    put(rft, "batch_size", 2, "rft")
    # the demo model solves few paper tasks: every scored rollout is trained on, so the weight
    # phases train (and serve their weights) whatever it scores
    put(rft, "threshold", -1.0, "rft")
    put(rft, "max_seq_len", min(rft.max_seq_len or 1024, 1024), "rft")
    # unset, a forward pass holds every call of the mini-batch's rollouts (chess: 2 x 9 rows of
    # up to 1024 tokens, 11 GB on the CPU); `whale run --dry-run` warns of it at full size
    put(rft, "micro_batch_size", rft.micro_batch_size or 1, "rft")
    if rft.keep_every:
        put(rft, "keep_every", min(rft.keep_every, STEPS), "rft")
    put(sw, "weight_steps_per_phase", STEPS, "switching")
    put(sw, "proposing_iterations_per_phase", 1, "switching")
    if sw.rule == "adaptive":  # each phase ends on its first chance, at the latest at STEPS
        for key, value in (
            ("harness_min_iterations", 1),
            ("harness_patience", 1),
            ("harness_max_iterations", 1),
            ("weight_burn_in", 0),
            ("weight_window", 1),
            ("weight_patience", 1),
            ("weight_max_steps", STEPS),
        ):
            put(sw, key, value, "switching")
    put(search, "candidates", 1, "search")
    put(search, "tasks", TASKS, "search")
    put(search, "samples", 1, "search")
    put(search, "proposer_timeout_s", 300.0, "search")
    if search.llm.url is None:  # the reflection model is the run's own, whose context shrank
        put(search.llm, "max_tokens", min(search.llm.max_tokens, PROPOSER_TOKENS), "search.llm")
    put(test, "k", 2, "test")
    put(test, "tasks", TASKS, "test")
    if test.every_weight_steps:
        put(test, "every_weight_steps", STEPS, "test")
    _shrink_budget(exp, put)
    rollout = exp.rollout
    for key, cap in (
        ("max_tokens_per_call", CALL_TOKENS),
        ("max_completion_tokens", ROLLOUT_TOKENS),
    ):
        put(rollout, key, min(getattr(rollout, key) or cap, cap), "rollout")
    if rollout.max_tokens is not None:
        put(rollout, "max_tokens", min(rollout.max_tokens, MAX_MODEL_LEN), "rollout")
    from app.loop.experiment_file import stored

    return Experiment.model_validate(stored(exp)), changed  # each value checked again


def _shrink_budget(exp: Experiment, put) -> None:
    """Two weight phases and one harness phase (whale, fast_slow: W H W); the others as their
    strategy has them: weight_only W W, harness_only H, stagewise W H."""
    budget = exp.budget
    for key in ("rollouts", "tokens", "wall_s", "proposer_usd"):
        put(budget, key, None, "budget")
    weights = {"whale": 2 * STEPS, "fast_slow": 2 * STEPS, "weight_only": 2 * STEPS}
    weights["stagewise"] = STEPS
    put(budget, "weight_steps", weights.get(exp.strategy), "budget")
    iterations = 1 if exp.strategy in ("harness_only", "stagewise") else None
    put(budget, "proposing_iterations", iterations, "budget")
    if exp.switching.end_on == "weight":  # needs a rollout budget; the length is set above
        put(exp.switching, "end_on", "any", "switching")


def stand_in_agent(folder: Path, experiment: Experiment) -> list[str]:
    """For the claude-code preset: the stand-in CLI as `claude` first on PATH (in this process,
    so the proposer finds it), readable inside the agent's sandbox; what was done, one line."""
    agent = experiment.search.agent
    if experiment.search.proposer != "agent" or agent.preset != "claude-code":
        return []
    folder.mkdir(parents=True, exist_ok=True)
    cli = folder / "claude"
    cli.write_text(STAND_IN)
    cli.chmod(cli.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    os.environ["PATH"] = f"{folder}{os.pathsep}{os.environ.get('PATH', '')}"
    agent.read_paths = [*agent.read_paths, str(folder)]
    return [f"search.agent: claude-code's CLI -> a stand-in ({cli}) writing one candidate"]


def findings(session, run_id: int) -> list[str]:
    """What went wrong in a rehearsed run that its status does not say: rollouts the model
    backend or the infrastructure failed, weight phases that trained nothing, proposing
    iterations that failed."""
    from sqlmodel import func, select

    from app.db.schema import Phase, Rollout, SearchIteration, TrainingJob

    found = []
    failed = session.exec(
        select(Rollout.reason, func.count(), func.min(Rollout.error))
        .join(Evaluation, Evaluation.id == Rollout.evaluation_id)
        .where(Evaluation.run_id == run_id, Rollout.reason.in_(("backend", "infrastructure")))
        .group_by(Rollout.reason)
    ).all()
    for reason, n, error in failed:
        found.append(f"{n} rollouts failed on the {reason}: {(error or '')[:300]}")
    jobs = session.exec(select(TrainingJob.status).where(TrainingJob.run_id == run_id)).all()
    weight = session.exec(
        select(Phase.id).where(Phase.run_id == run_id, Phase.kind == "weight")
    ).all()
    if weight and "done" not in jobs:
        found.append(f"no RFT step trained ({len(jobs)} steps: {', '.join(sorted(set(jobs)))})")
    errors = session.exec(
        select(SearchIteration.error)
        .join(Phase, Phase.id == SearchIteration.phase_id)
        .where(Phase.run_id == run_id, SearchIteration.error.is_not(None))
    ).all()
    if errors:
        found.append(f"{len(errors)} proposing iterations failed: {errors[0][:300]}")
    return found


def rehearsal_home() -> Path:
    return Path(tempfile.mkdtemp(prefix="whale-rehearsal-"))


def verdict(session, run_id: int) -> str:
    """`whale check`'s verdict on the run: "ok", or the broken checks' names."""
    from app.read.invariants import run_checks, store_checks

    broken = [c.name for c in run_checks(session, run_id) + store_checks(session) if not c.ok]
    return "ok" if not broken else "broken: " + ", ".join(broken)
