"""Experiment files: every shipped example parses; a bad one fails before anything starts,
naming the file and the offending key."""

import json
import os
from pathlib import Path

import pytest

from app.config import Settings
from app.loop.experiment_file import ExperimentError, dry_run, load, parse
from tests.conftest import REPO, whale

EXAMPLES = sorted((REPO / "experiments").rglob("*.toml"))
# the twelve paper files differ only in their table's values: dry-run in-process, below
COMMAND_LINE_EXAMPLES = [p for p in EXAMPLES if p.parent.name != "paper"]


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: str(p.relative_to(REPO / "experiments")))
def test_shipped_examples_parse(path: Path):
    experiment, text = load(path)
    assert experiment.name and text


@pytest.mark.parametrize(
    "text, message",
    [
        (
            'name = "x"\nstrategy = "alternating"',
            "strategy: Input should be 'whale', 'weight_only'",
        ),
        (
            'name = "x"\n[switching]\nweight_steps_per_phase = 0',
            "switching.weight_steps_per_phase: Input should be greater than or equal to 1",
        ),
        ('name = "x"\n[budget]\nrollout = 100', "budget.rollout: Extra inputs are not permitted"),
        (
            'name = "x"\n[rft]\nsteps = 3',
            "rft.steps is not used here: set switching.weight_steps_per_phase",
        ),
        ('name = "x"\n[search]\niterations = 3', "search.iterations is not used here"),
        ('name = "x"\nstrategy = "stagewise"', "strategy stagewise needs budget.rollouts"),
        ('name = "x"\nseeds = [1, 1]', "seeds: distinct integers from 0 to"),
        (
            'name = "x"\nstrategy = "fast_slow"',
            "strategy fast_slow interleaves RFT with prompt evolution every round: set "
            '[search] proposer = "gepa"',
        ),
        (
            'name = "x"\nstrategy = "fast_slow"\n[search]\nproposer = "gepa"\n'
            '[switching]\nrule = "adaptive"',
            '[switching] rule = "fixed"',
        ),
        (
            'name = "x"\n[search]\nproposer = "gepa"\n[search.options]\nprompt = "P"',
            "search.options: prompt: Extra inputs are not permitted",
        ),
        ('name = "x"\ndomain = "chess960"', "domain: unknown domain 'chess960'"),
        ('name = "x"\nharness = "/nonexistent/h.py"', "harness: no file /nonexistent/h.py"),
        (
            'name = "x"\n[search]\nproposer = "gpt"',
            "search.proposer: unknown proposer 'gpt'; known: agent, gepa, knobs, llm",
        ),
        ('strategy = "whale"', "name: Field required"),
        ('name = "x"\n[budget\nrollouts = 1', "not valid TOML"),
    ],
)
def test_bad_experiments_name_the_key(text, message):
    with pytest.raises(ExperimentError) as exc:
        parse(text, "bad.toml")
    assert str(exc.value).startswith("bad.toml: ") and message in str(exc.value)


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(ExperimentError, match="nope.toml: No such file"):
        load(tmp_path / "nope.toml")


@pytest.mark.parametrize("path", COMMAND_LINE_EXAMPLES, ids=lambda p: p.name)
def test_every_shipped_experiment_dry_runs_without_a_store(path: Path, tmp_path):
    """`whale run --dry-run` checks the experiment on the shipped sample data and prints what
    would run; it creates no store and starts no model."""
    env = {**os.environ, "WHALE_HOME": str(tmp_path / "home")}
    proc = whale("run", str(path), "--dry-run", "--json", env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    plan = json.loads(proc.stdout)
    experiment, _ = load(path)
    assert (plan["name"], plan["domain"], plan["strategy"]) == (
        experiment.name,
        experiment.domain,
        experiment.strategy,
    )
    assert all(n > 0 for n in plan["split_sizes"].values())
    assert plan["test"]["k"] == experiment.test.k
    assert not (tmp_path / "home" / "whale.db").exists()


def test_the_paper_experiments_are_the_generator_s_output():
    """experiments/paper/ is written by scripts/make_paper_experiments.py from one table: the
    shipped files are exactly its output, one per domain and strategy."""
    import runpy

    generator = runpy.run_path(str(REPO / "scripts" / "make_paper_experiments.py"))
    written = generator["files"]()
    shipped = {p.name: p.read_text() for p in (REPO / "experiments" / "paper").glob("*.toml")}
    assert shipped == written
    assert len(written) == 3 * 6  # five strategies and WHALE's adaptive variant
    for name, text in written.items():
        experiment = parse(text, name)
        strategy = name.split("-", 1)[1].removesuffix(".toml").removesuffix("-adaptive")
        assert experiment.strategy == strategy.replace("-", "_")
        assert experiment.scoring == "paper" and experiment.test.k == 8
        assert not experiment.rft.lora  # each setting against the release: test_paper_experiments
        settings = Settings(**experiment.runtime.model_dump(exclude_none=True))
        plan = dry_run(experiment, settings, name)  # what `whale run FILE --dry-run` prints
        assert plan["backend"] == "vllm" and plan["scoring"] == "paper"
        assert all(n > 0 for n in plan["split_sizes"].values())
        # the paper's 256 harness tasks; the shipped samples have fewer, and the plan says so
        assert any("256 harness tasks" in w for w in plan["warnings"]), plan["warnings"]


def test_a_dry_run_names_what_would_fail(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\n[sampling]\ntop_k = 20\n')  # the local backend has no top_k
    env = {**os.environ, "WHALE_HOME": str(tmp_path / "home")}
    proc = whale("run", str(bad), "--dry-run", env=env, timeout=120)
    assert proc.returncode == 2 and "top_k: the local backend does not support it" in proc.stderr


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({}, "in flight: up to 32 rollouts (the default (WHALE_CONCURRENCY))"),
        ({"WHALE_CONCURRENCY": "8"}, "in flight: up to 8 rollouts (WHALE_CONCURRENCY)"),
        (
            {"WHALE_BACKEND": "vllm", "WHALE_VLLM_ARGS": "--max-num-seqs=128"},
            "in flight: up to 128 rollouts (what the vLLM servers batch",
        ),
    ],
)
def test_the_dry_run_says_the_cap_on_rollouts_in_flight(env, says, tmp_path):
    path = REPO / "experiments" / "arith-quick.toml"
    clean = {k: v for k, v in os.environ.items() if not k.startswith("WHALE_")}
    env = {**clean, "WHALE_HOME": str(tmp_path / "home"), **env}
    proc = whale("run", str(path), "--dry-run", env=env, timeout=120)
    assert proc.returncode == 0 and says in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.parametrize("seeds", ["1,1", "0,x", "-3"])
def test_bad_seed_lists_are_refused_before_anything_starts(seeds, tmp_path):
    env = {**os.environ, "WHALE_HOME": str(tmp_path / "home")}
    path = REPO / "experiments" / "arith-quick.toml"
    proc = whale("run", str(path), "--seeds", seeds, "--dry-run", env=env, timeout=120)
    assert proc.returncode == 2 and "--seeds:" in proc.stderr and seeds in proc.stderr
    assert not (tmp_path / "home").exists()
