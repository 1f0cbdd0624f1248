"""`whale compare` and `whale export` as commands, registered on a Typer app of their own the
way app/cli/ registers them, over a store in WHALE_HOME."""

import json

import pytest
import typer
from typer.testing import CliRunner

from app.cli.report import compare, export

app = typer.Typer()
app.command()(compare)
app.command()(export)


@pytest.fixture
def whale(workbench, filled, monkeypatch, tmp_path):
    """Runs a command over the filled store, in an empty working folder."""
    monkeypatch.chdir(tmp_path)
    env = {"WHALE_HOME": str(workbench.settings.home), "COLUMNS": "200"}
    return lambda *args: CliRunner().invoke(app, [str(a) for a in args], env=env)


def test_compare_table_and_figure(whale, filled, tmp_path):
    runs = filled.runs
    result = whale("compare", runs["whale"].id, runs["weight_only"].id, runs["harness_only"].id)
    assert result.exit_code == 0, result.output
    # run, strategy, status, k, selected, max over test, rollouts to max, final, rollouts used,
    # test points, name; selected is the final point here (no harness-split scores)
    table = {
        words[1]: words[3:]
        for words in map(str.split, result.stdout.splitlines())
        if words and words[0].startswith("#")
    }
    # the whale run ended on a pair its test points never measured: untested, not 0.700
    assert table["whale"] == [
        "4",
        "0.700",
        "0.750",
        "1,024",
        "untested",
        "3,536",
        "5",
        "arith",
        "whale",
    ]
    assert table["weight_only"][:7] == ["4", "0.550", "0.550", "2,048", "0.550", "2,304", "3"]
    assert table["harness_only"][:7] == ["4", "0.600", "0.600", "800", "0.600", "1,600", "3"]
    assert (tmp_path / "compare.png").read_bytes().startswith(b"\x89PNG")


def test_compare_json_and_options(whale, filled, tmp_path):
    ids = [filled.runs["stagewise"].id, filled.runs["rft"].id]
    result = whale("compare", *ids, "--json", "--x", "wall_s", "--plot", "figs/wall.png")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    rows = data["runs"]
    assert data["groups"] == []  # no seed groups among these runs
    assert [(r["id"], r["best"], r["test_points"]) for r in rows] == [
        (ids[0], None, 0),
        (ids[1], 0.3, 2),
    ]
    assert (tmp_path / "figs" / "wall.png").is_file()


def test_compare_refuses_bad_input(whale, filled, tmp_path):
    result = whale("compare", filled.runs["whale"].id, 404, 405)
    assert result.exit_code == 2
    assert "no run 404, 405" in result.stderr and "Traceback" not in result.output
    result = whale("compare", filled.runs["whale"].id, "--x", "tokens")
    assert result.exit_code == 2 and "rollouts | weight_steps | wall_s" in result.output
    assert not (tmp_path / "compare.png").exists()


def test_export_default_folder(whale, filled, tmp_path):
    run_id = filled.runs["whale"].id
    result = whale("export", run_id)
    assert result.exit_code == 0, result.output
    out = tmp_path / f"whale-export-run-{run_id}"
    assert len((out / "rollouts.jsonl").read_text().splitlines()) == 5
    assert "rollouts.jsonl" in result.stdout and f"exported to {out.name}" in result.stdout
    again = whale("export", run_id)  # never writes into an earlier export
    assert again.exit_code == 2 and "not empty" in again.stderr


def test_export_unknown_run_and_store(whale, tmp_path, monkeypatch):
    result = whale("export", 999, "--out", "x")
    assert result.exit_code == 2 and "no run 999" in result.stderr
    assert not (tmp_path / "x").exists()
    result = CliRunner().invoke(app, ["export", "1"], env={"WHALE_HOME": str(tmp_path / "no")})
    assert result.exit_code == 2 and "no store at" in result.stderr
    assert not (tmp_path / "no").exists()  # nothing was created
