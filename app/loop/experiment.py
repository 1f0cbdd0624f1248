"""Experiments: a TOML file describes a run of the loop (see experiments/*.toml and README).

Every key is checked before anything starts; an unknown or invalid key is named in the error
together with the file, e.g. `x.toml: switching.weight_steps: Input should be greater than 0`.
"""
import hashlib
import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from app.config import RFTConfig, SearchConfig, describe

Strategy = Literal["whale", "weight_only", "harness_only", "stagewise"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Switching(_Strict):
    """When a phase ends. `fixed`: a set length. `adaptive`: patience (reference/whale.md)."""

    rule: Literal["fixed", "adaptive"] = "fixed"
    weight_steps: int = Field(default=2, ge=1, description="fixed: RFT steps per weight phase")
    harness_iterations: int = Field(default=2, ge=1, description="fixed: iterations per harness phase")
    # adaptive, harness phase: signal = best frontier success on the harness split
    harness_min_iterations: int = Field(default=5, ge=1)
    harness_patience: int = Field(default=2, ge=1)
    harness_max_iterations: int = Field(default=15, ge=1)
    # adaptive, weight phase: signal = mean training reward per step, smoothed over a window
    weight_window: int = Field(default=2, ge=1)
    weight_burn_in: int = Field(default=2, ge=0)
    weight_patience: int = Field(default=2, ge=1)
    weight_max_steps: int = Field(default=10, ge=1)


class TestSchedule(_Strict):
    k: int = Field(default=4, ge=1, description="samples per test task (mean@k)")
    tasks: int | None = Field(default=None, ge=1, description="first N test tasks (default all)")
    at_start: bool = True  # a point before anything is optimized
    after_phase: bool = True
    every_weight_steps: int = Field(default=0, ge=0, description="also every N RFT steps; 0: off")


class Budget(_Strict):
    """The run ends when any is used up; a step or iteration that would overshoot the rollout
    budget is not started, so strategies compare at equal rollouts."""

    rollouts: int | None = Field(default=None, ge=1)
    tokens: int | None = Field(default=None, ge=1)
    proposer_usd: float | None = Field(default=None, ge=0)
    wall_s: float | None = Field(default=None, gt=0)
    max_phases: int = Field(default=50, ge=1)  # a backstop when no budget is set


class Runtime(_Strict):
    """Process-level choices; `whale run` applies them, a server refuses a mismatch."""

    backend: Literal["local", "vllm"] | None = None
    llm_url: str | None = None
    llm_model: str | None = None
    sandbox: Literal["auto", "process", "docker"] | None = None


class Experiment(_Strict):
    name: str = Field(min_length=1, max_length=200)
    domain: str = "arith"
    harness: Path | None = None  # default: the domain's seed harness
    seed: int = 0
    strategy: Strategy = "whale"
    stagewise_weight_share: float = Field(default=0.5, gt=0, lt=1,
                                          description="stagewise: rollout share for weights")  # fmt: skip
    switching: Switching = Field(default_factory=Switching)
    rft: RFTConfig = Field(default_factory=RFTConfig)
    search: SearchConfig = Field(default_factory=SearchConfig)
    test: TestSchedule = Field(default_factory=TestSchedule)
    budget: Budget = Field(default_factory=Budget)
    runtime: Runtime = Field(default_factory=Runtime)

    @model_validator(mode="after")
    def _consistent(self):
        if "steps" in self.rft.model_fields_set:
            raise ValueError("rft.steps is not used here: set switching.weight_steps")
        if "iterations" in self.search.model_fields_set:
            raise ValueError("search.iterations is not used here: set switching.harness_iterations")
        if self.strategy == "stagewise" and self.budget.rollouts is None:
            raise ValueError("strategy stagewise needs budget.rollouts (it splits the rollouts)")
        return self


class ExperimentError(ValueError):
    pass


def parse(text: str, source: str = "experiment") -> Experiment:
    """The experiment in a TOML text; ExperimentError names the file and the offending key."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ExperimentError(f"{source}: not valid TOML: {exc}") from None
    try:
        experiment = Experiment.model_validate(data)
    except ValidationError as exc:
        raise ExperimentError(f"{source}: {describe(exc)}") from None
    from app.domains import get_domain

    try:
        get_domain(experiment.domain)
    except ValueError as exc:
        raise ExperimentError(f"{source}: domain: {exc}") from None
    if experiment.harness is not None:
        if not experiment.harness.is_file():
            raise ExperimentError(f"{source}: harness: no file {experiment.harness}")
        experiment.harness = experiment.harness.resolve()  # a resumed run may start elsewhere
    return experiment


def stored(experiment: Experiment) -> dict:
    """The experiment as the run keeps it: every value, minus the keys the loop sets itself."""
    return experiment.model_dump(mode="json", exclude={"rft": {"steps"}, "search": {"iterations"}})


def load(path: Path) -> tuple[Experiment, str]:
    """(experiment, its TOML text) from a file."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ExperimentError(f"{path}: {exc.strerror}") from None
    return parse(text, str(path)), text


def config_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]
