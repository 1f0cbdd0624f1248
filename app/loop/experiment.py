"""Experiments: a TOML file describes a run of the loop (see experiments/*.toml and README).

Every key is checked before anything starts; an unknown or invalid key is named in the error
together with the file, e.g. `x.toml: switching.weight_steps: Input should be greater than 0`.

The incoming harness is one of: `harness` (a file), `harness_id` (a harness the store holds),
`harness_code` (the code itself), or by default the domain's seed. An experiment that came over
HTTP may name only files of the shipped archive (`harness_archive/`): a web client must never
make the server read a path of its choosing.
"""

import hashlib
import os
import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from app import ROOT
from app.config import (
    MAX_SAMPLES,
    MAX_SEED,
    MAX_STEPS,
    MAX_TASKS,
    RFTConfig,
    SearchConfig,
    describe,
)
from app.llm.generation import RolloutLimits, Sampling, refused_fields

Strategy = Literal["whale", "weight_only", "harness_only", "stagewise", "fast_slow"]
HARNESS_KEYS = ("harness", "harness_id", "harness_code")  # at most one: the incoming harness
ARCHIVE = ROOT / "harness_archive"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Switching(_Strict):
    """When a phase ends. `fixed`: a set length. `adaptive`: patience (docs/algorithm.md)."""

    rule: Literal["fixed", "adaptive"] = "fixed"
    weight_steps: int = Field(
        default=2, ge=1, le=MAX_STEPS, description="fixed: RFT steps per weight phase"
    )
    harness_iterations: int = Field(
        default=2, ge=1, le=MAX_STEPS, description="fixed: iterations per harness phase"
    )
    # adaptive, harness phase: signal = best frontier success on the harness split
    harness_min_iterations: int = Field(default=5, ge=1, le=MAX_STEPS)
    harness_patience: int = Field(default=2, ge=1, le=MAX_STEPS)
    harness_max_iterations: int = Field(default=15, ge=1, le=MAX_STEPS)
    # adaptive, weight phase: signal = mean training reward per step, smoothed over a window
    weight_window: int = Field(default=2, ge=1, le=MAX_STEPS)
    weight_burn_in: int = Field(default=2, ge=0, le=MAX_STEPS)
    weight_patience: int = Field(default=2, ge=1, le=MAX_STEPS)
    weight_max_steps: int = Field(default=10, ge=1, le=MAX_STEPS)
    # "weight": the run ends on a weight phase, as the paper's runs do: a harness phase leaves
    # the rollouts of one RFT step, and the run's last phase uses them
    end_on: Literal["any", "weight"] = "any"


class TestSchedule(_Strict):
    k: int = Field(default=4, ge=1, le=MAX_SAMPLES, description="samples per test task (mean@k)")
    tasks: int | None = Field(
        default=None, ge=1, le=MAX_TASKS, description="first N test tasks (default all)"
    )
    at_start: bool = True  # a point before anything is optimized
    after_phase: bool = True
    every_weight_steps: int = Field(
        default=0, ge=0, le=MAX_STEPS, description="also every N RFT steps; 0: off"
    )


class Budget(_Strict):
    """The run ends when any is used up; a step or iteration that would overshoot the rollout
    budget is not started, so strategies compare at equal rollouts."""

    rollouts: int | None = Field(default=None, ge=1, le=10**10)
    tokens: int | None = Field(default=None, ge=1, le=10**14)
    proposer_usd: float | None = Field(default=None, ge=0, le=10**7)
    wall_s: float | None = Field(default=None, gt=0, le=10**8)  # about three years
    max_phases: int = Field(default=50, ge=1, le=MAX_STEPS)  # a backstop when no budget is set


class Runtime(_Strict):
    """Process-level choices; `whale run` applies them, a server refuses a mismatch."""

    backend: Literal["local", "vllm"] | None = None
    llm_url: str | None = None
    llm_model: str | None = None
    sandbox: Literal["auto", "process", "docker"] | None = None


def distinct_seeds(seeds: list[int]) -> bool:
    """The rule of a seed group (the file's `seeds`, `whale run --seeds`): the same seed twice
    would be one run counted twice."""
    return len(set(seeds)) == len(seeds) and all(0 <= s <= MAX_SEED for s in seeds)


class Experiment(_Strict):
    name: str = Field(min_length=1, max_length=200)
    domain: str = "arith"
    harness: Path | None = None  # a file (over HTTP: one of harness_archive/); default: the seed
    harness_id: int | None = Field(default=None, ge=1, le=2**63 - 1, description="a stored harness")
    harness_code: str | None = Field(default=None, max_length=10_000_000, description="the code")
    seed: int = Field(default=0, ge=0, le=MAX_SEED)
    # one run per seed, grouped (`whale run --seeds 0,1,2` overrides); compared as a group
    seeds: list[int] | None = Field(default=None, min_length=1, max_length=100)
    strategy: Strategy = "whale"
    stagewise_weight_share: float = Field(
        default=0.5, gt=0, lt=1, description="stagewise: rollout share for weights"
    )
    switching: Switching = Field(default_factory=Switching)
    rft: RFTConfig = Field(default_factory=RFTConfig)
    search: SearchConfig = Field(default_factory=SearchConfig)
    test: TestSchedule = Field(default_factory=TestSchedule)
    budget: Budget = Field(default_factory=Budget)
    runtime: Runtime = Field(default_factory=Runtime)
    sampling: Sampling = Field(default_factory=Sampling)
    rollout: RolloutLimits = Field(default_factory=RolloutLimits)
    scoring: str | None = Field(
        default=None,
        max_length=40,
        description="the verifier's mode, e.g. paper (the release's rules); default: the domain's",
    )

    @model_validator(mode="after")
    def _consistent(self):
        given = [k for k in HARNESS_KEYS if getattr(self, k) is not None]
        if len(given) > 1:
            raise ValueError(f"give one of {', '.join(HARNESS_KEYS)} (given: {', '.join(given)})")
        if self.seeds is not None and not distinct_seeds(self.seeds):
            raise ValueError(f"seeds: distinct integers from 0 to {MAX_SEED}, not {self.seeds}")
        if "seed" not in self.rft.model_fields_set:  # the run's seed orders and trains RFT
            self.rft.seed = self.seed
        if "seed" not in self.search.model_fields_set:  # ...and draws a proposer's choices
            self.search.seed = self.seed
        if "steps" in self.rft.model_fields_set:
            raise ValueError("rft.steps is not used here: set switching.weight_steps")
        if "iterations" in self.search.model_fields_set:
            raise ValueError("search.iterations is not used here: set switching.harness_iterations")
        if self.switching.end_on == "weight" and (
            self.strategy not in ("whale", "stagewise", "fast_slow") or self.budget.rollouts is None
        ):
            raise ValueError(
                "switching.end_on = weight needs strategy whale, stagewise or fast_slow and "
                "budget.rollouts (the last weight step is kept out of the rollout budget)"
            )
        if self.strategy == "fast_slow" and (
            self.search.proposer != "gepa" or self.switching.rule != "fixed"
        ):  # stated in the file, not implied, so the run's config says what ran
            raise ValueError(
                "strategy fast_slow interleaves RFT with prompt evolution every round: set "
                '[search] proposer = "gepa" and [switching] rule = "fixed"'
            )
        if self.strategy == "stagewise" and self.budget.rollouts is None:
            raise ValueError("strategy stagewise needs budget.rollouts (it splits the rollouts)")
        return self


class ExperimentError(ValueError):
    pass


def parse(
    text: str, source: str = "experiment", web: bool = False, seed: int | None = None
) -> Experiment:
    """The experiment in a TOML text; ExperimentError names the file and the offending key.
    `web`: it came over HTTP, so a `harness` file must be one of the archive's. `seed`: the run
    of that seed of a group (`seeds`): its seed set, " seed N" added to its name."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ExperimentError(f"{source}: not valid TOML: {exc}") from None
    if seed is not None and isinstance(data, dict):
        data["seed"], data["name"] = seed, f"{data.get('name', '')} seed {seed}"
    try:
        experiment = Experiment.model_validate(data)
    except ValidationError as exc:
        raise ExperimentError(f"{source}: {describe(exc)}") from None
    from app.domains import get_domain, scoring_of

    try:
        domain = get_domain(experiment.domain)
    except ValueError as exc:
        raise ExperimentError(f"{source}: domain: {exc}") from None
    try:
        scoring_of(domain, experiment.scoring)
    except ValueError as exc:
        raise ExperimentError(f"{source}: {exc}") from None
    if experiment.strategy != "weight_only":  # a plugin that does not import, before any run
        from app.search.proposers import proposer_factory

        try:
            factory = proposer_factory(experiment.search.proposer)
        except ValueError as exc:
            raise ExperimentError(f"{source}: search.proposer: {exc}") from None
        options = getattr(factory, "options", None)
        if options is not None:
            try:
                options.model_validate(experiment.search.options)
            except ValidationError as exc:
                raise ExperimentError(f"{source}: search.options: {describe(exc)}") from None
    if experiment.harness is not None:
        experiment.harness = _harness_file(experiment.harness, source, web)
    return experiment


def _harness_file(path: Path, source: str, web: bool) -> Path:
    if web:  # resolved inside the archive; a path outside it is never looked at, not even stat()
        inside = Path(os.path.normpath(ROOT / path)).is_relative_to(ARCHIVE)
        resolved = (ROOT / path).resolve() if inside else None  # then symlinks must stay inside
        if not (
            inside
            and resolved.is_relative_to(ARCHIVE)
            and resolved.suffix == ".py"
            and resolved.is_file()
        ):
            raise ExperimentError(
                f"{source}: harness: {str(path)!r} is not a file of harness_archive/; over HTTP "
                'the harness is an archive file (harness = "harness_archive/seeds/arith/seed.py"), '
                "a stored harness (harness_id = N) or the code itself (harness_code, a TOML string)"
            )
        return resolved
    if not path.is_file():
        raise ExperimentError(f"{source}: harness: no file {path}")
    return path.resolve()  # a resumed run may start elsewhere


def check_generation(experiment: Experiment, backend: str, source: str = "experiment") -> None:
    """Refuse a [sampling] field the model backend does not take, before any run exists."""
    refused = refused_fields(experiment.sampling.defaults(), backend)
    if refused:
        raise ExperimentError(f"{source}: sampling: {refused}")


def incoming_harness(
    experiment: Experiment, session, source: str = "experiment"
) -> tuple[str, str]:
    """(name, code) of the run's first harness, checked as a proposed candidate is (it parses,
    defines `run`, imports nothing the domain forbids) before any run exists."""
    from app.db.schema import Harness
    from app.domains import get_domain
    from app.search.validate import static_error

    domain = get_domain(experiment.domain)
    key = next((k for k in HARNESS_KEYS if getattr(experiment, k) is not None), "harness")
    if experiment.harness_id is not None:
        row = session.get(Harness, experiment.harness_id)
        if row is None:
            raise ExperimentError(f"{source}: harness_id: no harness {experiment.harness_id}")
        name, code = row.name, row.code
    elif experiment.harness_code is not None:
        name, code = "harness_code.py", experiment.harness_code
    else:
        path = experiment.harness or domain.seed_harness
        try:
            name, code = path.name, path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise ExperimentError(f"{source}: harness: cannot read {path}: {exc}") from None
    error = static_error(code, domain.forbidden_modules, experiment.search.max_code_bytes)
    if error:
        raise ExperimentError(f"{source}: {key}: not a harness: {error}")
    return name, code


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


def dry_run(experiment: Experiment, settings, source: str = "experiment") -> dict:
    """What `whale run` would start, checked as far as it can be without a store or a model:
    the settings against the backend, the harness, the data each split finds. Raises
    ExperimentError naming what would fail."""
    from app.domains import get_domain, scoring_of

    check_generation(experiment, settings.backend_name, source)
    if experiment.harness_id is None:  # a stored harness is checked when the run starts
        name, _ = incoming_harness(experiment, None, source)
    else:
        name = f"harness {experiment.harness_id} of the store"
    domain = get_domain(experiment.domain)
    sizes = {split: len(domain.tasks(split)) for split in ("train", "harness", "test")}
    wanted = {"test": experiment.test.tasks, "harness": experiment.search.tasks}
    warnings = [
        f"asks for {n} {split} tasks; the {split} split found has {sizes[split]}, all of them used"
        for split, n in wanted.items()
        if n is not None and n > sizes[split]
    ]
    model = settings.llm_model or (
        f"the vLLM servers at {settings.vllm_urls}"
        if settings.vllm_urls
        else f"the default model (SmolLM2-135M-Instruct, decoded in {settings.local_dtype})"
    )
    return {
        "name": experiment.name,
        "strategy": experiment.strategy,
        "domain": experiment.domain,
        "split_sizes": sizes,
        "harness": name,
        "scoring": scoring_of(domain, experiment.scoring),
        "backend": settings.backend_name,
        "model": model,
        "switching": experiment.switching.model_dump(exclude_none=True),
        "rft": experiment.rft.model_dump(exclude_none=True),
        "search": experiment.search.model_dump(exclude_none=True),
        "test": experiment.test.model_dump(exclude_none=True),
        "budget": experiment.budget.model_dump(exclude_none=True),
        "sampling": experiment.sampling.defaults(),
        "rollout": experiment.rollout.model_dump(exclude_none=True),
        "warnings": warnings,
    }
