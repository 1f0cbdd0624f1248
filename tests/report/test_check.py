"""`whale check RUN`: every invariant ok on a consistent run (exit 0); each kind of break is
named with the rows that break it (exit 1)."""

import json

import pytest
import typer
from typer.testing import CliRunner

from app.cli.report import check
from app.db.schema import Checkpoint, Event, Metric, Phase, Run, now

app = typer.Typer()
app.command()(check)
app.command("noop")(lambda: None)  # two commands: typer then takes the command's name


@pytest.fixture
def consistent(store, tmp_path):
    """A finished loop run: one done phase whose harness-split evaluation holds its 2 rollouts,
    a test evaluation, a trained checkpoint folder with its files, and its run_end event."""
    run = store.write(Run(name="loop", kind="experiment", domain="arith", status="done"))
    harness = store.harness(run)
    folder = tmp_path / "ckpt"
    (folder / "adapter").mkdir(parents=True)
    (folder / "adapter" / "adapter_config.json").write_text("{}")
    header = json.dumps({"__metadata__": {}}).encode()
    weights = len(header).to_bytes(8, "little") + header
    (folder / "adapter" / "adapter_model.safetensors").write_bytes(weights)
    checkpoint = store.write(Checkpoint(name="ckpt", kind="lora", path=str(folder), run_id=run.id))
    phase = store.write(
        Phase(
            run_id=run.id, kind="harness", round=1, status="done", ended_reason="fixed", rollouts=2
        )
    )
    search = store.evaluation(
        run, harness, checkpoint, n_tasks=2, status="done", n_done=2, phase_id=phase.id
    )
    store.write_values(search, split="harness")
    rollouts = store.rollouts(search, ["pass", "fail"])
    test = store.evaluation(run, harness, checkpoint, n_tasks=1, status="done", n_done=1)
    store.rollouts(test, ["pass"])
    store.write(Event(run_id=run.id, kind="run_end", detail={"status": "done"}))
    return {"run": run, "harness": harness, "folder": folder, "phase": phase, "rollouts": rollouts}


@pytest.fixture
def whale(workbench):
    env = {"WHALE_HOME": str(workbench.settings.home), "COLUMNS": "200"}
    return lambda *args: CliRunner().invoke(app, ["check", *map(str, args)], env=env)


def broken(result) -> dict[str, list[str]]:
    return {c["name"]: c["broken"] for c in json.loads(result.stdout) if not c["ok"]}


def test_a_consistent_run_passes_every_check(whale, consistent):
    result = whale(consistent["run"].id)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert len(lines) == 13 and all(line.startswith("ok ") for line in lines), lines
    assert "ok integrity: PRAGMA integrity_check is ok" in lines


def test_each_break_is_named_with_its_rows(whale, store, consistent):
    run, phase, (first, _) = consistent["run"], consistent["phase"], consistent["rollouts"]
    store.write_values(first, status="pending")  # a rollout left behind in a done evaluation
    store.write_values(phase, rollouts=5)
    store.write_values(consistent["harness"], code="def run(task, llm, tools):\n    return 1\n")
    (consistent["folder"] / "adapter" / "adapter_model.safetensors").write_bytes(b"\x10junk")
    store.write(Phase(run_id=run.id, kind="weight", round=1, status="running"))

    result = whale(run.id, "--json")
    assert result.exit_code == 1, (result.output, result.exception)
    found = broken(result)
    assert set(found) == {
        "rollouts finished",
        "nothing left running",
        "evaluation counts",
        "phase counts",
        "harness code",
        "checkpoints",
    }, found
    pending = f"rollout {first.id} pending in evaluation {first.evaluation_id} (done)"
    assert found["rollouts finished"] == [pending]
    assert (
        "n_done 2" in found["evaluation counts"][0]
        and "1 finished" in found["evaluation counts"][0]
    )
    assert found["phase counts"] == [f"phase {phase.id} says 5 rollouts, its evaluations hold 1"]
    assert "does not read as safetensors" in found["checkpoints"][0]
    assert found["nothing left running"][0].startswith("phase ")

    plain = whale(run.id)  # the same as text: the broken checks first say how many rows
    assert plain.exit_code == 1 and "1 broken phase counts" in plain.stdout


def test_a_fault_left_out_of_the_log_a_wrong_curve_point_and_an_overspent_budget_break(
    whale, store, consistent
):
    run, (first, _) = consistent["run"], consistent["rollouts"]
    ended = now()
    # an infrastructure failure with no fault of the model server or the sandboxes logged
    store.write_values(first, status="infra", reason="infrastructure", finished_at=ended)
    test = store.evaluation(
        run, consistent["harness"], store.checkpoint("other"), n_tasks=1, status="done"
    )
    store.write_values(test, mean_at_k=0.25)
    point = store.write(
        Metric(run_id=run.id, series="test/mean@k", x=0, rollouts=3, y=0.5, evaluation_id=test.id)
    )
    store.write_values(run, config={"experiment": {"budget": {"rollouts": 1}}})

    found = broken(whale(run.id, "--json"))
    assert found["faults logged"] == [
        f"rollout {first.id} (infra, infrastructure): no fault logged before it ended"
    ]
    assert found["curve and budget"] == [
        f"curve point {point.id} plots 0.5 for evaluation {test.id} (done, mean@k 0.25)",
        "a curve point at 3 rollouts; the run used 2",
        "the run used 2 rollouts of a budget of 1",
    ]
    # a fault logged before the rollout ended tells its story; one logged after does not
    late = store.write(Event(run_id=run.id, kind="model_calls_failing", detail={"why": "x"}))
    assert "faults logged" in broken(whale(run.id, "--json"))
    store.write_values(late, created_at=ended)
    assert "faults logged" not in broken(whale(run.id, "--json"))


def test_the_run_page_warns_when_a_check_breaks(client, store, consistent):
    run, phase = consistent["run"], consistent["phase"]
    page = client.get(f"/runs/{run.id}").text
    # the page asks for its checks as it loads, apart: they read all of the run's rows
    assert f'hx-get="/runs/{run.id}/checks" hx-trigger="load"' in page
    assert 'id="broken-checks"' not in client.get(f"/runs/{run.id}/checks").text
    assert client.get(f"/api/runs/{run.id}/checks").json() == {"run_id": run.id, "broken": []}

    store.write_values(phase, rollouts=5)
    checks = client.get(f"/runs/{run.id}/checks").text
    assert 'id="broken-checks"' in checks and f"whale check {run.id}" in checks
    assert f"phase {phase.id} says 5 rollouts, its evaluations hold 2" in checks
    (broken,) = client.get(f"/api/runs/{run.id}/checks").json()["broken"]
    assert (broken["name"], broken["n"]) == ("phase counts", 1)
    assert client.get("/api/runs/999/checks").status_code == 404


def test_an_unknown_run_is_refused(whale, consistent):
    result = whale(999)
    assert result.exit_code == 2 and "no run 999" in result.output
