"""Tables. The DDL that creates them lives in migrations.py; tests check the two agree."""

import hashlib
import json
import zlib
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Column, LargeBinary
from sqlalchemy.types import TypeDecorator
from sqlmodel import Field, SQLModel


def now() -> datetime:
    return datetime.now(UTC)


def sha_of(code: str) -> str:
    """A harness's sha: of its code, so the same code is the same harness wherever it came from."""
    return hashlib.sha256(code.encode()).hexdigest()


def utc(value: datetime | None) -> datetime | None:
    """SQLite hands datetimes back without a zone; they were written in UTC, so say so."""
    if value is not None and value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value


class ZJSON(TypeDecorator):
    """JSON compressed with zlib: messages and stdout dominate the database size."""

    impl = LargeBinary
    cache_ok = True

    def process_bind_param(self, value: Any, dialect) -> bytes | None:
        if value is None:
            return None
        return zlib.compress(json.dumps(value, ensure_ascii=False).encode(), 3)

    def process_result_value(self, value: bytes | None, dialect) -> Any:
        return None if value is None else json.loads(zlib.decompress(value))


def zjson(**kw) -> Any:
    return Field(default=None, sa_column=Column(ZJSON, **kw))


class Run(SQLModel, table=True):
    id: int | None = Field(default=None, primary_key=True)
    name: str
    kind: str  # eval | rft | search (one phase, from the CLI) | experiment (the loop)
    domain: str
    # created | resuming | running | paused | stopping | stopped | done | failed
    status: str = "created"
    config: dict | None = zjson()
    created_at: datetime = Field(default_factory=now)
    finished_at: datetime | None = None
    strategy: str | None = (
        None  # experiments: whale | weight_only | harness_only | stagewise | fast_slow
    )
    desired: str | None = None  # what the user asked: running | paused | stopped
    command: dict | None = zjson()  # a one-shot action (skip, force, promote) not yet taken
    # a fork (app/loop/fork.py): the run it branched from, after which of its phases
    parent_run_id: int | None = Field(default=None, foreign_key="run.id")
    fork_phase: int | None = None


class Harness(SQLModel, table=True):
    id: int | None = Field(default=None, primary_key=True)
    run_id: int | None = Field(default=None, foreign_key="run.id", index=True)
    parent_id: int | None = Field(default=None, foreign_key="harness.id")
    name: str
    code: str
    sha: str = Field(index=True)
    hypothesis: str | None = None
    proposer: str = "user"  # user | seed | agent | llm | knobs
    valid: bool = True
    error: str | None = None  # why validation refused it (shown, never dropped)
    created_at: datetime = Field(default_factory=now)
    # Search candidates: the phase and iteration that made them, what they try, all parents
    # (parent_id is the first of them: the harness the proposer edited).
    phase_id: int | None = Field(default=None, foreign_key="phase.id")
    iteration: int | None = None
    axis: str | None = None  # which part of the harness it touches (prompt, tools, voting...)
    changes: str | None = None  # what changed, in the proposer's words
    parent_ids: list | None = zjson()


class Checkpoint(SQLModel, table=True):
    id: int | None = Field(default=None, primary_key=True)
    run_id: int | None = Field(default=None, foreign_key="run.id")
    parent_id: int | None = Field(default=None, foreign_key="checkpoint.id")
    kind: str = "base"  # base | lora | full
    name: str  # the model name the backend serves it under
    path: str | None = None  # base: the weights folder; lora: the checkpoint folder
    training_job_id: int | None = Field(default=None, foreign_key="training_job.id")
    size_bytes: int | None = None
    created_at: datetime = Field(default_factory=now)
    # retention deleted its weights folder (app/training/retention.py); the row stays
    weights_dropped_at: datetime | None = None


class Evaluation(SQLModel, table=True):
    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="run.id", index=True)
    harness_id: int = Field(foreign_key="harness.id")
    checkpoint_id: int = Field(foreign_key="checkpoint.id")
    split: str
    k: int
    n_tasks: int
    status: str = "running"  # running | done | failed | stopped (cut short by a stop)
    mean_at_k: float | None = None
    mean_turns: float | None = None
    total_tokens: int | None = None
    n_done: int = 0
    # rollouts that ended by an infrastructure failure after their retries: left out of
    # mean@k, mean_turns and RFT (app/rollout/evaluate.py)
    n_infra: int = 0
    created_at: datetime = Field(default_factory=now)
    finished_at: datetime | None = None
    phase_id: int | None = Field(default=None, foreign_key="phase.id")
    # backend, sampling defaults, forced fields and rollout budgets (app/llm/generation.py)
    generation: dict | None = zjson()
    scoring: str | None = None  # the verifier's mode: lenient, paper, ... (app/domains)
    # the 95% interval of mean_at_k over the tasks (app/stats.py); None without tasks
    ci_low: float | None = None
    ci_high: float | None = None


class Rollout(SQLModel, table=True):
    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="run.id")
    evaluation_id: int = Field(foreign_key="evaluation.id")
    harness_id: int = Field(foreign_key="harness.id")
    checkpoint_id: int = Field(foreign_key="checkpoint.id")
    task_id: str
    sample: int
    task: dict | None = zjson()  # the public fields the harness saw
    gold: str | None = None
    status: str = "pending"  # pending | pass | fail | error | timeout | infra
    reason: str | None = None  # short failure category, e.g. syntax_error, timeout, output_limit
    error: str | None = None  # the full message / traceback tail
    answer: str | None = None
    reward: float | None = None
    turns: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    wall_s: float | None = None  # from the worker's start to its answer
    # wall_s split: the harness's own time (what its time limit counts) and the time its model
    # and tool calls took to be answered (which depends on how busy the model server is)
    harness_s: float | None = None
    model_wait_s: float | None = None
    attempts: int = 0  # 1, or more when infrastructure failures were retried
    stdout_tail: str | None = None
    stderr_tail: str | None = None
    created_at: datetime = Field(default_factory=now)
    started_at: datetime | None = None  # when it was admitted (created_at: when it was queued)
    finished_at: datetime | None = None


class Step(SQLModel, table=True):
    id: int | None = Field(default=None, primary_key=True)
    rollout_id: int = Field(foreign_key="rollout.id")
    idx: int
    kind: str  # model | tool
    tool: str | None = None
    request: dict | None = zjson()  # model: messages + sampling; tool: arguments
    response: dict | None = zjson()  # model: message, finish_reason; tool: result
    error: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_ms: float = 0.0
    created_at: datetime = Field(default_factory=now)
    # model: the prompt and completion token ids the server returned, packed (app/db/steps.py);
    # left out of dumps and pages (binary, and for training only)
    token_ids: bytes | None = Field(default=None, sa_column=Column(LargeBinary), exclude=True)


class TrainingJob(SQLModel, table=True):
    """One RFT step: sample under (harness, checkpoint), keep the accepted, train, register."""

    __tablename__ = "training_job"
    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="run.id")
    harness_id: int = Field(foreign_key="harness.id")
    checkpoint_in_id: int = Field(foreign_key="checkpoint.id")
    checkpoint_out_id: int | None = Field(default=None, foreign_key="checkpoint.id")
    evaluation_id: int | None = Field(default=None, foreign_key="evaluation.id")  # the sampling
    step: int
    # sampling | training | done | skipped (nothing accepted) | failed | cancelled
    status: str = "sampling"
    config: dict | None = zjson()
    n_rollouts: int = 0
    n_accepted: int = 0
    mean_reward: float | None = None
    n_examples: int = 0
    tokens_trained: int = 0
    n_truncated: int | None = None  # examples longer than max_seq_len (trained on their start)
    n_dropped: int | None = None  # examples with nothing trainable within max_seq_len
    max_seq_len: int | None = None
    optimizer_carried: bool | None = None  # continued an AdamW (optimizer_state "phase" or "run")
    loss: float | None = None
    error: str | None = None
    log_tail: str | None = None
    created_at: datetime = Field(default_factory=now)
    finished_at: datetime | None = None
    phase_id: int | None = Field(default=None, foreign_key="phase.id")
    # seconds per part of the step: sampling_s, scoring_s, training_s, saving_s, sync_s
    timings: dict | None = zjson()
    # what was trained (app/training/examples.py): examples made of the token ids the model
    # sampled, examples rendered through the chat template (the server returned no ids), and of
    # the model calls with ids, how many rendering would have tokenized otherwise (drift)
    n_from_ids: int | None = None
    n_rendered: int | None = None
    n_drift: int | None = None
    n_drift_checked: int | None = None


class Phase(SQLModel, table=True):
    """One weight or harness phase of a run. Round r is the r-th phase of its kind."""

    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="run.id")
    kind: str  # weight | harness
    round: int
    status: str = "running"  # running | done | failed
    # fixed | patience | budget | manual | exhausted | proposer_error | error | stopped | failed
    ended_reason: str | None = None
    harness_in_id: int | None = Field(default=None, foreign_key="harness.id")
    harness_out_id: int | None = Field(default=None, foreign_key="harness.id")
    checkpoint_in_id: int | None = Field(default=None, foreign_key="checkpoint.id")
    checkpoint_out_id: int | None = Field(default=None, foreign_key="checkpoint.id")
    rollouts: int = 0  # rollouts this phase used
    detail: dict | None = zjson()
    created_at: datetime = Field(default_factory=now)
    finished_at: datetime | None = None


class SearchIteration(SQLModel, table=True):
    """One iteration of a harness phase: propose, validate, evaluate, select."""

    __tablename__ = "search_iteration"
    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="run.id")
    phase_id: int = Field(foreign_key="phase.id")
    iteration: int  # 0 re-evaluates the incoming harness
    proposer: str
    status: str = "running"  # running | done | failed (the proposer failed; recorded, not fatal)
    error: str | None = None
    n_candidates: int = 0
    n_valid: int = 0
    best_harness_id: int | None = Field(default=None, foreign_key="harness.id")
    accepted_harness_id: int | None = Field(default=None, foreign_key="harness.id")
    best_success: float | None = None  # best success rate on the frontier after this iteration
    frontier: list | None = zjson()  # [{harness_id, success, turns}]
    # the commit gate's decision on each candidate of the iteration, by harness id:
    # {rule, commit, statistic, n_tasks, why, rollouts} (app/search/acceptance.py)
    gate: dict | None = zjson()
    prompt_tokens: int = 0  # the proposer's own cost
    completion_tokens: int = 0
    cost_usd: float | None = None
    proposer_wall_s: float | None = None
    wall_s: float | None = None
    report: str | None = None
    created_at: datetime = Field(default_factory=now)
    finished_at: datetime | None = None


class Metric(SQLModel, table=True):
    """One point of a curve: series (e.g. "train/loss", "test/mean@k") at x, after `rollouts`
    (rollouts the run used so far, test evaluations not counted)."""

    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="run.id")
    training_job_id: int | None = Field(default=None, foreign_key="training_job.id")
    series: str
    x: float
    rollouts: int
    y: float
    created_at: datetime = Field(default_factory=now)
    evaluation_id: int | None = Field(default=None, foreign_key="evaluation.id")  # test points
    weight_steps: int | None = None  # RFT steps done so far
    wall_s: float | None = None  # seconds since the run started


class Event(SQLModel, table=True):
    id: int | None = Field(default=None, primary_key=True)
    run_id: int | None = Field(default=None, foreign_key="run.id")
    kind: str
    detail: dict | None = zjson()
    created_at: datetime = Field(default_factory=now)


# What people write on runs and rollouts (app/annotations.py writes them; the loop never does).


class RunTag(SQLModel, table=True):
    __tablename__ = "run_tag"
    run_id: int = Field(foreign_key="run.id", primary_key=True)
    tag: str = Field(primary_key=True)
    created_at: datetime = Field(default_factory=now)


class RunNote(SQLModel, table=True):
    __tablename__ = "run_note"
    run_id: int = Field(foreign_key="run.id", primary_key=True)
    text: str
    updated_at: datetime = Field(default_factory=now)


class RolloutLabel(SQLModel, table=True):
    __tablename__ = "rollout_label"
    rollout_id: int = Field(foreign_key="rollout.id", primary_key=True)
    label: str = Field(primary_key=True)
    created_at: datetime = Field(default_factory=now)


class RolloutNote(SQLModel, table=True):
    __tablename__ = "rollout_note"
    rollout_id: int = Field(foreign_key="rollout.id", primary_key=True)
    text: str
    updated_at: datetime = Field(default_factory=now)
