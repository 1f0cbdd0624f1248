"""The budget sweep of benchmarks/strategies.py: its experiment copies, its figure's data and
the table of where each WHALE run's rollouts went, on a store the loop's writer filled."""

import json
import os
import signal
import subprocess
import sys
import time
import tomllib

import pytest

from benchmarks.strategies import (
    REPO,
    allocation_table,
    compare,
    finished_runs,
    pin_store,
    plot_budget_sweep,
    run_minutes,
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


def test_comparing_writes_nothing_where_the_sweep_runs(workbench, filled, tmp_path, monkeypatch):
    """The tables' `whale compare` draws its figure elsewhere: a compare.png left in the
    checkout would make the tree dirty, and the sweep's section would not be written."""
    here = tmp_path / "checkout"
    here.mkdir()
    monkeypatch.chdir(here)
    ids = [r.id for r in filled.runs.values()]
    _, by_id = compare(ids, {**os.environ, "WHALE_HOME": str(workbench.settings.home)})
    assert sorted(by_id) == sorted(ids)
    assert list(here.iterdir()) == []


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


def git(repo, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def commit_files(repo, files: dict[str, str]) -> str:
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "change")
    return git(repo, "rev-parse", "--short", "HEAD")


def test_a_store_holds_the_runs_of_one_version_of_the_run_code(tmp_path):
    """The first sitting writes its commit; a later checkout that changed only docs, tests or
    the benchmarks' reporting may go on (the pinned commit stays); one that changed what the
    runs execute is refused before it runs anything, as is a commit git does not know."""
    repo, home = tmp_path / "repo", tmp_path / "home"
    repo.mkdir()
    git(repo, "init", "-q")
    first = commit_files(repo, {"app/loop.py": "v1\n", "docs/a.md": "a\n"})
    assert pin_store(home, repo) == first
    commit_files(repo, {"docs/a.md": "b\n", "benchmarks/strategies.py": "report\n"})
    commit_files(repo, {"tests/test_x.py": "t\n", "README.md": "r\n"})
    assert pin_store(home, repo) == first
    assert json.loads((home / "benchmark.json").read_text()) == {"commit": first}
    changed = commit_files(repo, {"app/loop.py": "v2\n"})
    with pytest.raises(SystemExit, match=f"made at commit {first}; this checkout \\({changed}\\)"):
        pin_store(home, repo)
    (home / "benchmark.json").write_text(json.dumps({"commit": "0000000"}))
    with pytest.raises(SystemExit, match="made at commit 0000000"):
        pin_store(home, repo)


def test_a_later_sitting_keeps_the_experiment_copies_its_runs_were_made_from(tmp_path):
    source = REPO / "experiments" / "stories-whale.toml"
    copy = variant(source, tmp_path, "b512", budget=512)
    assert variant(source, tmp_path, "b512", budget=512) == copy  # the same text: fine
    copy.write_text(copy.read_text() + "# edited\n")
    with pytest.raises(SystemExit, match="differs from the copy"):
        variant(source, tmp_path, "b512", budget=512)


def test_the_wall_time_is_the_runs_own_over_sittings(workbench, store):
    """From each start or resume to the next interruption or end; a run killed with no word
    counts to its last event; the hours between sittings do not count."""
    from datetime import UTC, datetime, timedelta

    from app.db.schema import Event

    t0 = datetime(2026, 12, 5, 20, 0, tzinfo=UTC)

    def events(run, *timeline):
        store.write(
            *[
                Event(run_id=run.id, kind=kind, created_at=t0 + timedelta(minutes=m))
                for kind, m in timeline
            ]
        )

    interrupted = store.run("a seed 0")
    events(
        interrupted,
        ("run_start", 0),
        ("phase_start", 1),
        ("run_interrupted", 10),
        ("run_resumed", 130),  # two hours later, the next sitting
        ("run_end", 135),
    )
    killed = store.run("a seed 1")
    events(killed, ("run_start", 140), ("phase_end", 146), ("run_resumed", 300), ("run_end", 302))
    workbench.writer.flush()
    db = workbench.settings.db_path
    assert run_minutes(db, [interrupted.id]) == pytest.approx(15)
    assert run_minutes(db, [killed.id]) == pytest.approx(8)
    assert run_minutes(db, [interrupted.id, killed.id]) == pytest.approx(23)


def test_a_sweep_stopped_with_sigterm_stops_the_run_it_waits_for(tmp_path):
    """The signal reaches the child (here a stand-in for `whale run` that records it and exits
    as an interrupted run would), and the sweep waits for it rather than leaving it running."""
    child = (
        "import signal, sys, time\n"
        "def stop(*_):\n"
        f"    open({str(tmp_path / 'stopped')!r}, 'w').write('SIGTERM')\n"
        "    sys.exit(3)\n"
        "signal.signal(signal.SIGTERM, stop)\n"
        "print('running', flush=True)\n"
        f"open({str(tmp_path / 'ready')!r}, 'w').close()\n"
        "time.sleep(60)\n"
    )
    sweep = (
        "import os, sys\n"
        "from benchmarks.strategies import run_passing_sigterm\n"
        f"code, out = run_passing_sigterm([sys.executable, '-c', {child!r}], dict(os.environ))\n"
        "print(code, out.strip())\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", sweep], cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 60
    while not (tmp_path / "ready").exists():  # the child is started and has set its handler
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert out.strip() == "3 running"  # the child's own exit and output, after it stopped
    assert (tmp_path / "stopped").read_text() == "SIGTERM"
