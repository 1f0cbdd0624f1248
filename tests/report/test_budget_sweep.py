"""The budget sweep of benchmarks/strategies.py: its experiment copies, its figure's data and
the table of where each WHALE run's rollouts went, on a store the loop's writer filled."""

import json
import tomllib

import pytest

from benchmarks.common import commit
from benchmarks.strategies import (
    REPO,
    allocation_table,
    finished_runs,
    pin_store,
    plot_budget_sweep,
    record_minutes,
    variant,
)
from tests.report.synthetic_experiments import PHASE_ROLLOUTS


def test_a_budget_copy_changes_only_the_budget_and_the_name(tmp_path):
    source = REPO / "experiments" / "stories-whale-adaptive.toml"
    copy = variant(source, tmp_path, "b512", budget=512)
    before, after = tomllib.loads(source.read_text()), tomllib.loads(copy.read_text())
    assert after["budget"]["rollouts"] == 512 and before["budget"]["rollouts"] == 256
    assert after["name"] == "stories-whale-adaptive-b512"
    del before["budget"], after["budget"], before["name"], after["name"]
    assert after == before


def test_the_figure_draws_one_line_per_strategy_with_its_seed_band(tmp_path):
    def group(name, mean, ci):
        return {"group": name, "selected_mean": mean, "selected_ci": ci}

    by_budget = {
        512: [group("stories-whale-b512", 0.3, [0.1, 0.5]), group("stories-h-b512", 0.5, None)],
        256: [group("stories-whale-b256", 0.2, [0.0, 0.4]), group("stories-h-b256", 0.4, None)],
    }
    path = tmp_path / "sweep.png"
    lines = plot_budget_sweep(by_budget, path)
    assert path.stat().st_size > 10_000
    # budgets in order, the band from each group's interval over seeds; one seed: no band
    assert lines == {
        "stories-whale": [(256, 0.2, 0.0, 0.4), (512, 0.3, 0.1, 0.5)],
        "stories-h": [(256, 0.4, 0.4, 0.4), (512, 0.5, 0.5, 0.5)],
    }


def test_where_the_rollouts_went_is_read_from_the_store(workbench, filled):
    table = allocation_table(workbench.settings.db_path, [r.id for r in filled.runs.values()])
    rows = [line for line in table.splitlines()[2:]]
    assert len(rows) == 1, table  # only the WHALE run: the other strategies have no such split
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    whale = filled.runs["whale"]
    assert cells[0] == f"{whale.id} {whale.name}"
    assert cells[1:3] == [str(n) for n in PHASE_ROLLOUTS["whale"]]
    assert cells[4] == "WH" and cells[5] == "0/0"  # its one RFT step accepted nothing


def test_a_sweep_resumed_in_its_store_keeps_the_runs_it_finished(workbench, store, tmp_path):
    """A second sitting skips the seeds whose run of the same file is done; a run of that name
    started from another file, or not finished, is run (resumed) again."""
    from app.loop.experiment_file import config_hash

    home = workbench.settings.home
    path = variant(REPO / "experiments" / "stories-whale.toml", home, "b512", budget=512)
    text = path.read_text()
    name = "stories-whale-b512"
    done = store.run(f"{name} seed 0", config={"hash": config_hash(text)})
    store.run(f"{name} seed 1", status="paused", config={"hash": config_hash(text)})
    store.run(f"{name} seed 2", config={"hash": config_hash(text + "\n# edited\n")})
    store.run("stories-whale-b256 seed 2", config={"hash": config_hash(text)})
    assert finished_runs(home, path, [0, 1, 2]) == {0: done.id}
    assert finished_runs(tmp_path / "no-store", path, [0, 1, 2]) == {}


def test_a_store_holds_one_commits_runs(tmp_path):
    """The first sitting writes its commit; a later one adds its minutes; another commit's
    sitting is refused before it runs anything."""
    head, _ = commit()
    assert pin_store(tmp_path) == 0
    record_minutes(tmp_path, 42.5)
    assert pin_store(tmp_path) == 42.5
    (tmp_path / "benchmark.json").write_text(json.dumps({"commit": "0000000", "minutes": 3}))
    with pytest.raises(SystemExit, match=f"made at commit 0000000, this checkout is at {head}"):
        pin_store(tmp_path)
