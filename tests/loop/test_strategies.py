"""The strategies on the demo model: which phases each runs, within its rollout budget."""

import asyncio
import json
import re
import sqlite3

import pytest

from app.cli.loop import summary
from app.db import open_engine, read_session
from app.loop.driver import Loop, start_experiment_run
from app.loop.experiment_file import config_hash, dry_run, incoming_harness, parse
from tests.conftest import REPO, attached_settings, started_workbench, whale
from tests.loop.conftest import logged, quick_toml, store_invariants


@pytest.mark.slow
def test_whale_run_alternates_phases_within_the_budget(tmp_path, whale_env):
    path = tmp_path / "quick.toml"
    path.write_text(quick_toml(rollouts=44, switching={"end_on": '"weight"'}))
    proc = whale("run", str(path), "--json", env=whale_env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    kinds = [p["kind"] for p in result["phases"]]
    assert kinds[:3] == ["weight", "harness", "weight"]
    assert result["status"] == "done" and result["ended"] == "budget used up"
    # with 44 rollouts, a second harness phase and the reserved last RFT step do not both fit:
    # what is left goes to weight phases (each 1 step here), and the run ends on one
    assert result["phases"][-1]["ended"] in ("budget", "fixed")
    used = [p["rollouts"] for p in result["test_points"]]
    assert used == sorted(used) and used[0] == 0 and 0 < used[-1] <= 44
    # each phase starts from where the previous one ended
    for before, after in zip(result["phases"], result["phases"][1:]):
        assert after["harness_in"] == before["harness_out"]
        assert after["checkpoint_in"] == before["checkpoint_out"]
    counts = store_invariants(tmp_path / "home" / "whale.db")
    assert counts["phase"] == len(kinds)
    # end_on = "weight": the harness phases left one RFT step, and the last phase used it
    assert kinds[-1] == "weight" and "harness" in kinds
    final = final_of(tmp_path / "home" / "whale.db", result["run_id"])
    assert final["last_phase"]["kind"] == "weight"


def final_of(db, run_id: int) -> dict:
    """The run's final pair as its page reports it, read from the store directly."""
    from app.db import open_engine, read_session
    from app.read.runs import final_pair

    with read_session(open_engine(db)) as s:
        return final_pair(s, run_id)


def run_in_process(text: str, settings) -> int:
    """Start the experiment in `text` on a workbench in this process and run it to its end."""

    async def main():
        async with started_workbench(settings) as workbench:
            experiment = parse(text)
            with workbench.session() as s:
                incoming = incoming_harness(experiment, s)
            run = await start_experiment_run(
                workbench, experiment, text, config_hash(text), incoming
            )
            await Loop(workbench, run.id).run()
            return run.id

    return asyncio.run(main())


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["weight_only", "harness_only", "stagewise"])
def test_single_side_and_stagewise_strategies(strategy, tmp_path, model_server, model_cache):
    text = quick_toml(strategy, strategy, rollouts=26, test={"at_start": "false"})
    run_id = run_in_process(text, attached_settings(tmp_path / "home", model_server, model_cache))
    con = sqlite3.connect(tmp_path / "home" / "whale.db")
    phases = con.execute(
        "SELECT kind, ended_reason FROM phase WHERE run_id = ? ORDER BY id", (run_id,)
    ).fetchall()
    if strategy == "weight_only":
        assert {k for k, _ in phases} == {"weight"}
    elif strategy == "harness_only":
        assert {k for k, _ in phases} == {"harness"}
    else:  # one weight stage, until its share of the rollouts (half) is used, then harness phases
        assert phases[0] == ("weight", "stage") and {k for k, _ in phases[1:]} == {"harness"}
    used = con.execute(
        """SELECT count(*) FROM rollout r JOIN evaluation e ON e.id = r.evaluation_id
                          WHERE r.run_id = ? AND e.split != 'test'""",
        (run_id,),
    ).fetchone()[0]
    assert used <= 26
    store_invariants(tmp_path / "home" / "whale.db")


@pytest.mark.slow
def test_stagewise_ends_once_its_proposer_has_nothing_left(tmp_path, model_server, model_cache):
    """After the weight stage only harness phases follow: once the knobs proposer has tried every
    choice, the run ends there instead of starting harness phases that can find nothing."""
    seed = (REPO / "harness_archive" / "seeds" / "arith" / "seed.py").read_text()
    one_knob = re.sub(  # one untried choice in all: the first harness phase uses it up
        r"(?ms)^PARAMS = \{.*?^\}\n", 'PARAMS = {"PROMPT_STYLE": ["plain", "answer_only"]}\n', seed
    )
    (tmp_path / "one_knob.py").write_text(one_knob)
    text = quick_toml(
        "exhaust",
        "stagewise",
        rollouts=400,  # far more than the one knob can use
        search={"tasks": "1"},
        test={"at_start": "false", "after_phase": "false"},
    ).replace(
        "seed = 0\n",
        f'seed = 0\nstagewise_weight_share = 0.02\nharness = "{tmp_path / "one_knob.py"}"\n',
    )  # a weight stage of one RFT step
    settings = attached_settings(tmp_path / "home", model_server, model_cache)
    run_id = run_in_process(text, settings)
    con = sqlite3.connect(tmp_path / "home" / "whale.db")
    phases = con.execute(
        "SELECT kind, ended_reason FROM phase WHERE run_id = ? ORDER BY id", (run_id,)
    ).fetchall()
    assert phases[0] == ("weight", "stage") and phases[-1] == ("harness", "exhausted")
    assert [r for _, r in phases].count("exhausted") == 1, phases
    with read_session(open_engine(tmp_path / "home" / "whale.db")) as s:
        ended = summary(s, run_id)["ended"]  # what `whale run` prints as the run's end
    assert ended == "the proposer has nothing left to try"


@pytest.mark.slow
def test_fast_slow_interleaves_rft_with_prompt_evolution(tmp_path, model_server, model_cache):
    """Fast-Slow Training: weight and prompt phases alternate; the run's own model writes the
    prompts, and every candidate differs from its parent in the prompt alone."""
    from tests.search.test_gepa import module_body_without

    text = quick_toml(
        "fast-slow", "fast_slow", rollouts=26, search={"proposer": '"gepa"'}, test={"k": 1}
    )
    text += "\n[search.llm]\nmax_tokens = 64\nfailures = 1\nsuccesses = 1\n"
    run_id = run_in_process(text, attached_settings(tmp_path / "home", model_server, model_cache))
    con = sqlite3.connect(tmp_path / "home" / "whale.db")
    kinds = [
        k for (k,) in con.execute("SELECT kind FROM phase WHERE run_id = ? ORDER BY id", (run_id,))
    ]
    # weight and prompt phases alternate, a weight phase first, for as long as the budget lasts
    assert kinds[:2] == ["weight", "harness"] and all(a != b for a, b in zip(kinds, kinds[1:]))
    candidates = con.execute(
        "SELECT proposer, code, parent_id, valid, error FROM harness WHERE iteration > 0"
    ).fetchall()
    assert len(candidates) == 2 * kinds.count("harness") and {c[0] for c in candidates} == {"gepa"}
    for _, code, parent_id, valid, error in candidates:
        if not valid:  # what the demo model wrote was empty or a copy: said so
            assert error in ("the reply held no prompt",) or error.startswith("duplicate"), error
            continue
        (parent,) = con.execute("SELECT code FROM harness WHERE id = ?", (parent_id,)).fetchone()
        assert module_body_without(code, "SYSTEM_PROMPT") == module_body_without(
            parent, "SYSTEM_PROMPT"
        )
    (tokens,) = con.execute(
        "SELECT prompt_tokens FROM search_iteration WHERE iteration = 1"
    ).fetchone()
    assert tokens > 0  # the reflections are counted in the run's token budget
    store_invariants(tmp_path / "home" / "whale.db")


@pytest.mark.slow
def test_seeds_run_one_grouped_run_each_and_compare_aggregates_them(tmp_path, whale_env):
    path = tmp_path / "seeds.toml"
    path.write_text(
        quick_toml(
            "seeded",
            "harness_only",
            rollouts=5,  # one harness phase each: what is checked is the grouping
            search={"tasks": "2", "candidates": "1"},
            test={"tasks": "2", "at_start": "false"},
        )
    )
    proc = whale("run", str(path), "--seeds", "3,4", "--json", env=whale_env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["group"] == {"name": "seeded", "seeds": [3, 4]}
    names = [r["name"] for r in out["runs"]]
    assert names == ["seeded seed 3", "seeded seed 4"]
    assert out["n_seeds"] == 2 and "mean over 2 seeds" in out["design"]
    ids = [r["run_id"] for r in out["runs"]]
    finals = [r["test_points"][-1]["mean_at_k"] for r in out["runs"]]
    assert out["final_mean"] == pytest.approx(sum(finals) / 2)
    compared = json.loads(
        whale(
            "compare", *map(str, ids), "--json", "--plot", str(tmp_path / "c.png"), env=whale_env
        ).stdout
    )
    (group,) = compared["groups"]
    assert (group["group"], group["runs"], group["n_seeds"]) == ("seeded", ids, 2)
    assert group["seeds"] == [3, 4] and group["vs_baseline"] is None  # the only group
    assert group["final_mean"] == pytest.approx(out["final_mean"])
    # the seeds reached the runs: each run's experiment carries its own
    from app.db import open_engine, read_session
    from app.db.schema import Run

    with read_session(open_engine(tmp_path / "home" / "whale.db")) as s:
        seeds = [s.get(Run, i).config["experiment"]["seed"] for i in ids]
        assert seeds == [3, 4] and s.get(Run, ids[0]).config["group"]["seeds"] == [3, 4]


@pytest.mark.slow
def test_budgets_in_the_release_units_end_runs_as_its_launchers_do(
    tmp_path, model_server, model_cache
):
    """budget.weight_steps (the release's TOTAL_STEPS) ends an alternating run with the weight
    phase that takes the last step, a shorter one if the phase length does not divide it, as
    run/lib/alternate.sh does; stagewise takes every step, then proposes until
    budget.proposing_iterations."""
    settings = attached_settings(tmp_path / "home", model_server, model_cache)
    common = {
        "switching": {"weight_steps_per_phase": "2", "proposing_iterations_per_phase": "1"},
        "test": {"at_start": "false", "after_phase": "false"},
        "search": {"tasks": "2", "candidates": "1"},
    }
    whale_text = quick_toml("steps", "whale", **common).replace("rollouts = 60", "weight_steps = 3")
    stagewise_text = quick_toml("stages", "stagewise", **common).replace(
        "rollouts = 60", "weight_steps = 2\nproposing_iterations = 2"
    )
    planned = {
        name: dry_run(parse(text), settings)["work"]
        for name, text in (("whale", whale_text), ("stagewise", stagewise_text))
    }
    runs = {"whale": run_in_process(whale_text, settings)}
    runs["stagewise"] = run_in_process(stagewise_text, settings)
    con = sqlite3.connect(tmp_path / "home" / "whale.db")

    def phases(run_id):
        return con.execute(
            """SELECT p.kind, p.ended_reason,
                      (SELECT count(*) FROM training_job j WHERE j.phase_id = p.id),
                      (SELECT count(*) FROM search_iteration i
                        WHERE i.phase_id = p.id AND i.iteration > 0)
                 FROM phase p WHERE p.run_id = ? ORDER BY p.id""",
            (run_id,),
        ).fetchall()

    assert phases(runs["whale"]) == [
        ("weight", "fixed", 2, 0),
        ("harness", "fixed", 0, 1),
        ("weight", "budget", 1, 0),  # the third and last step: the run ends here
    ]
    assert phases(runs["stagewise"]) == [
        ("weight", "stage", 2, 0),
        ("harness", "fixed", 0, 1),
        ("harness", "budget", 0, 1),
    ]
    ends = {e.run_id: e.detail["reason"] for e in logged(tmp_path / "home" / "whale.db", "run_end")}
    assert ends[runs["whale"]] == ends[runs["stagewise"]] == "budget used up"
    # the dry run said so beforehand, in phases and in the rollouts they imply
    assert (planned["whale"]["weight_phases"], planned["whale"]["harness_phases"]) == (2, 1)
    assert planned["whale"]["weight_rollouts"] == 3 * 4 * 2
    assert planned["whale"]["harness_rollouts"] == 2 + 1 * (2 + 1)  # sweep + K x (2 + smoke)
    assert planned["stagewise"]["proposing_iterations"] == 2
    for name, run_id in runs.items():
        (used,) = con.execute(
            """SELECT count(*) FROM rollout r JOIN evaluation e ON e.id = r.evaluation_id
                WHERE r.run_id = ? AND e.split != 'test' AND r.status != 'pending'""",
            (run_id,),
        ).fetchone()
        assert used == planned[name]["rollouts"], name
    store_invariants(tmp_path / "home" / "whale.db")
