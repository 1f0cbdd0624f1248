"""An experiment file read and checked: a TOML file describes a run of the loop (see
experiments/*.toml and docs/loop.md; every key it may hold is in app/experiment_schema.py).
`parse` and `load` read one, `incoming_harness` finds its harness, `dry_run` says its plan.

Every key is checked before anything starts; an unknown or invalid key is named in the error
together with the file, e.g.
`x.toml: switching.weight_steps_per_phase: Input should be greater than or equal to 1`.

The incoming harness is one of: `harness` (a file), `harness_id` (a harness the store holds),
`harness_code` (the code itself), or by default the domain's seed. An experiment that came over
HTTP may name only files of the shipped archive (`harness_archive/`): a web client must never
make the server read a path of its choosing.
"""

import ast
import hashlib
import os
import tomllib
from pathlib import Path

from pydantic import ValidationError

from app import ROOT, syntax_tree
from app.experiment_schema import HARNESS_KEYS, Experiment, describe
from app.llm.generation import refused_fields

ARCHIVE = ROOT / "harness_archive"


class ExperimentError(ValueError):
    pass


# Keys an experiment file does not take, and where what they mean is set: said with the key
# rather than pydantic's "extra input". `whale train` and `whale search` take the length of
# their one phase as an option; the loop's phases take theirs from [switching].
ELSEWHERE = {
    ("switching", "harness_iterations"): "is now proposing_iterations_per_phase, the proposing "
    "iterations after the incoming harness's evaluation: the release's I = 6 is "
    "proposing_iterations_per_phase = 5",
    ("switching", "proposing_iterations"): "is now proposing_iterations_per_phase (a harness "
    "phase's length; budget.proposing_iterations is the run's total)",
    ("switching", "weight_steps"): "is now weight_steps_per_phase (a weight phase's length; "
    "budget.weight_steps is the run's total)",
    ("sampling", "fixed"): "is now override_harness (the decoding fields of [sampling] override "
    "the harness's own on every call)",
    ("rft", "steps"): "is not used here: set switching.weight_steps_per_phase",
    ("search", "iterations"): "is not used here: set switching.proposing_iterations_per_phase",
}


def parse(
    text: str,
    source: str = "experiment",
    web: bool = False,
    seed: int | None = None,
    fork: bool = False,
) -> Experiment:
    """The experiment in a TOML text; ExperimentError names the file and the offending key.
    `web`: it came over HTTP, so a `harness` file must be one of the archive's. `seed`: the run
    of that seed of a group (`seeds`): its seed set, " seed N" added to its name. `fork`: a fork
    starts from its fork point's harness (app/loop/fork.py), so the harness keys are dropped
    unread (a parent started from a file outside the archive is forked over HTTP too)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ExperimentError(f"{source}: not valid TOML: {exc}") from None
    if fork and isinstance(data, dict):
        for key in HARNESS_KEYS:
            data.pop(key, None)
    if seed is not None and isinstance(data, dict):
        data["seed"], data["name"] = seed, f"{data.get('name', '')} seed {seed}"
    for (section, key), why in ELSEWHERE.items():
        table = data.get(section) if isinstance(data, dict) else None
        if isinstance(table, dict) and key in table:
            raise ExperimentError(f"{source}: {section}.{key} {why}")
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
    from app.harness_code import static_error

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
    defined = {n.name for n in syntax_tree.parse(code).body if isinstance(n, ast.FunctionDef)}
    missing = [f for f in experiment.search.fixed_functions if f not in defined]
    if missing:  # a fixed runner the incoming harness lacks would fix nothing
        raise ExperimentError(
            f"{source}: search.fixed_functions: the incoming harness defines no "
            f"{', '.join(missing)}"
        )
    return name, code


def stored(experiment: Experiment) -> dict:
    """The experiment as the run keeps it: every value, as JSON."""
    return experiment.model_dump(mode="json")


def load(path: Path, fork: bool = False) -> tuple[Experiment, str]:
    """(experiment, its TOML text) from a file (`fork`: as parse takes it)."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ExperimentError(f"{path}: {exc.strerror}") from None
    return parse(text, str(path), fork=fork), text


def config_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def dry_run(experiment: Experiment, settings, source: str = "experiment") -> dict:
    """What `whale run` would start, checked as far as it can be without a store or a model:
    the settings against the backend, the harness, the data each split finds. Raises
    ExperimentError naming what would fail."""
    from app.domains import get_domain, scoring_of
    from app.loop.schedule import schedule
    from app.search.proposers import proposer_timeout

    check_generation(experiment, settings.backend_name, source)
    if experiment.harness_id is None:  # a stored harness is checked when the run starts
        name, code = incoming_harness(experiment, None, source)
    else:
        name, code = f"harness {experiment.harness_id} of the store", None
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
        "search": {
            **experiment.search.model_dump(exclude_none=True),
            "proposer_timeout_s": proposer_timeout(experiment.search),  # the one in force
        },
        "test": experiment.test.model_dump(exclude_none=True),
        "budget": experiment.budget.model_dump(exclude_none=True),
        "sampling": {
            **experiment.sampling.defaults(),
            "override_harness": sorted(experiment.sampling.forced()) or False,
        },
        "rollout": experiment.rollout.model_dump(exclude_none=True),
        "work": planned_work(experiment, sizes),
        # turns, epochs and the effective batch, in the paper's units (app/loop/schedule.py)
        "schedule": schedule(experiment, settings, sizes["train"], code),
        "in_flight": planned_in_flight(settings),
        "warnings": warnings,
    }


def planned_in_flight(settings) -> str:
    """The cap on rollouts in flight the run would start with (app/rollout/admission.py)."""
    import shlex

    from app.llm.vllm import flag_value
    from app.rollout.admission import in_flight_cap

    explicit = "concurrency" in settings.model_fields_set
    if settings.backend_name != "vllm" or explicit:
        cap, why = in_flight_cap(settings.concurrency, explicit, None)
        return f"up to {cap} rollouts ({why})"
    given = flag_value(shlex.split(settings.vllm_args or ""), "--max-num-seqs")
    if given and given.isdigit() and not settings.vllm_urls:
        cap, why = in_flight_cap(settings.concurrency, False, int(given))
        return f"up to {cap} rollouts ({why})"
    return (
        "up to what the vLLM servers batch (max_num_seqs x replicas, read from them at start; "
        f"vLLM's default is 256 or more on a GPU), at least {settings.concurrency}"
    )


def planned_work(experiment: Experiment, sizes: dict[str, int]) -> dict:
    """What a run of fixed phase lengths will do, in phases and rollouts, from its budgets in
    the release's units (budget.weight_steps, budget.proposing_iterations): what those units
    imply. A rollout budget, an adaptive rule or a budget left open gives only what is known."""
    budget, switching, rft, search = (
        experiment.budget,
        experiment.switching,
        experiment.rft,
        experiment.search,
    )
    step = rft.prompts_per_step * rft.samples_per_prompt
    sweep = min(search.tasks or sizes["harness"], sizes["harness"]) * search.samples
    proposing = search.candidates * (sweep + (1 if search.smoke else 0))  # smoke rollouts count
    work: dict = {"rollouts_per_weight_step": step, "rollouts_per_proposing_iteration": proposing}
    if budget.rollouts is not None:
        work["rollout_budget"] = budget.rollouts
    set_lengths = switching.rule == "fixed"  # each phase as long as [switching] says
    # per run ([budget]); [switching]'s weight_steps_per_phase and
    # proposing_iterations_per_phase are per phase
    run_steps, run_iterations = budget.weight_steps, budget.proposing_iterations
    strategy = experiment.strategy
    if strategy in ("whale", "fast_slow") and run_steps and set_lengths:
        weight_phases = -(-run_steps // switching.weight_steps_per_phase)  # the last may be shorter
        harness_phases = weight_phases - 1  # none after the weight phase that ends the run
        run_iterations = harness_phases * switching.proposing_iterations_per_phase
    elif strategy == "weight_only" and run_steps:
        weight_phases = -(-run_steps // switching.weight_steps_per_phase)
        harness_phases, run_iterations = 0, 0
    elif strategy == "harness_only" and run_iterations and set_lengths:
        weight_phases, run_steps = 0, 0
        harness_phases = -(-run_iterations // switching.proposing_iterations_per_phase)
    elif strategy == "stagewise" and run_steps and run_iterations and set_lengths:
        weight_phases = 1
        harness_phases = -(-run_iterations // switching.proposing_iterations_per_phase)
    else:
        return work  # lengths decided as the run goes
    # each harness phase first evaluates its incoming harness under its checkpoint, unless
    # that pair was evaluated already: after a weight phase it is new, between two harness
    # phases (stagewise, harness-only) it is not
    sweeps = harness_phases if strategy in ("whale", "fast_slow") else min(harness_phases, 1)
    harness_rollouts = sweeps * sweep + run_iterations * proposing
    work |= {
        "weight_phases": weight_phases,
        "harness_phases": harness_phases,
        "weight_steps": run_steps,
        "proposing_iterations": run_iterations,
        "weight_rollouts": run_steps * step,
        "harness_rollouts": harness_rollouts,
        "rollouts": run_steps * step + harness_rollouts,  # test rollouts are reporting, not counted
    }
    return work
