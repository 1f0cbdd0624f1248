"""Intervals and paired comparisons where scores are shown: evaluations finished the way the
evaluator finishes them (app/rollout/evaluate.py), then compared by `whale compare`, its JSON
and its page."""

import json

import pytest

from app.db.schema import Evaluation, Metric, Run
from app.phases import plot_test_point
from app.read.compare import compare_runs
from app.rollout.evaluate import _finish
from tests.api.synthetic_store import client  # noqa: F401 - fixture
from tests.conftest import error_detail, whale

N_TASKS = 24


def scored_run(
    store, name: str, passing: set[int], k: int = 2, n_tasks: int = N_TASKS, config=None
):
    """A run with one finished test evaluation: the tasks in `passing` pass every sample, the
    others fail every one."""
    run = store.write(
        Run(name=name, kind="experiment", domain="arith", status="done", config=config)
    )
    evaluation = store.evaluation(
        run, store.harness(run, name=f"{name}.py"), store.checkpoint(), n_tasks, k=k
    )
    statuses = ["pass" if i // k in passing else "fail" for i in range(n_tasks * k)]
    store.rollouts(evaluation, statuses)
    finished = store.writer.submit(lambda s: _finish(s, evaluation.id)).result()
    store.writer.submit(lambda s: plot_test_point(s, run.id, finished, 10, 0, 1.0)).result()
    return run, finished


def test_compare_pairs_final_scores_on_shared_tasks(store, workbench, client):  # noqa: F811
    base_run, base = scored_run(store, "base", passing=set(range(6)))  # 6 of 24
    better_run, better = scored_run(store, "better", passing=set(range(6)) | set(range(10, 22)))
    for e, score in ((base, 6 / 24), (better, 18 / 24)):
        assert e.mean_at_k == score and e.ci_low < score < e.ci_high
    # 24 binary tasks around 0.25: the interval spans roughly +-0.17, not the +-0.12 that
    # 48 independent samples would claim
    assert 0.25 < base.ci_high - base.ci_low < 0.45

    with workbench.session() as s:
        first, second = compare_runs(s, [base_run.id, better_run.id])
    assert first["paired"] is None and first["final_ci"] == [base.ci_low, base.ci_high]
    p = second["paired"]
    assert (p["against"], p["n_tasks"], p["b_better"], p["a_better"]) == (base_run.id, 24, 12, 0)
    assert p["difference"] == 0.5 and p["low"] > 0 and p["p_value"] < 0.001
    assert "paired on 24 shared test tasks; one run each (one seed)" == p["design"]

    page = client.get(f"/runs/compare?ids={base_run.id}&ids={better_run.id}").text
    assert f"[{base.ci_low:.3f}, {base.ci_high:.3f}]" in page and "+0.500" in page
    assert "24 tasks, paired" in page
    api = client.get(f"/api/runs/compare?ids={base_run.id}&ids={better_run.id}").json()
    assert api["runs"][1]["paired"]["difference"] == 0.5
    point = api["curves"][next(iter(api["curves"]))][0]
    assert (point["low"], point["high"]) == (base.ci_low, base.ci_high)


def test_every_task_failed_on_four_tasks_is_not_shown_as_certain(store, workbench, client):  # noqa: F811
    """0 of 4 is consistent with a true rate near 0.5: no page claims [0.000, 0.000], and each
    says beside the figure that it rests on few tasks."""
    a_run, a = scored_run(store, "a", passing=set(), k=1, n_tasks=4)
    b_run, _ = scored_run(store, "b", passing=set(), k=1, n_tasks=4)
    assert (a.mean_at_k, a.ci_low) == (0.0, 0.0) and a.ci_high == pytest.approx(0.602, abs=1e-3)

    ids = f"ids={a_run.id}&ids={b_run.id}"
    data = client.get(f"/api/runs/compare?{ids}").json()
    first, second = data["runs"]
    assert (first["test_tasks"], first["few_tasks"], first["final_ci"]) == (
        4,
        True,
        [0.0, a.ci_high],
    )
    p = second["paired"]
    assert (p["difference"], p["p_value"], p["n_tasks"], p["few_tasks"]) == (0.0, 1.0, 4, True)
    assert p["low"] < -0.5 and p["high"] > 0.5  # two runs failing 4 tasks may differ a lot
    page = client.get(f"/runs/compare?{ids}").text
    assert "[0.000, 0.000]" not in page and "[0.000, 0.602]" in page
    assert "+0.000 <span" in page and "p = 1, 4 tasks, paired" in page
    assert page.count("only 4 tasks") == 3  # two final scores and the paired difference

    run_page = client.get(f"/runs/{a_run.id}").text
    assert "test mean@k (only 4 tasks: intervals wide)" in run_page  # the chart's title
    assert "only 4 tasks</span>" in run_page  # the evaluation's row
    (row,) = client.get(f"/api/runs/{a_run.id}").json()["evaluations"]
    assert (row["n_tasks"], row["few_tasks"], row["ci_high"]) == (4, True, a.ci_high)
    (point,) = data["curves"][next(iter(data["curves"]))]
    assert (point["n_tasks"], point["few_tasks"]) == (4, True)

    # 30 tasks are not few
    enough_run, enough = scored_run(store, "enough", passing={0}, k=1, n_tasks=30)
    enough_page = client.get(f"/runs/{enough_run.id}").text
    assert "only 30 tasks" not in enough_page and "intervals wide" not in enough_page
    assert client.get(f"/api/runs/{enough_run.id}").json()["evaluations"][0]["few_tasks"] is False


def test_seeds_that_agree_on_few_tasks_are_not_certain_either(store, client):  # noqa: F811
    """Two strategies under three seeds, every run failing the same 4 tasks: the seeds agree
    exactly, and still neither the group's score nor its difference is a point."""
    runs = []
    for strategy in ("whale", "harness_only"):
        for seed in (0, 1, 2):
            group = {"group": {"name": strategy, "seeds": [0, 1, 2]}, "experiment": {"seed": seed}}
            runs.append(scored_run(store, f"{strategy} {seed}", set(), 1, 4, group)[0])
    query = "&".join(f"ids={run.id}" for run in runs)
    base, other = client.get(f"/api/runs/compare?{query}").json()["groups"]
    assert base["selected_mean"] == 0.0
    assert base["selected_ci"] == [0.0, pytest.approx(0.602, abs=1e-3)]  # as wide as one run's
    pairs = other["vs_baseline"]
    assert (pairs["difference"], pairs["p_value"]) == (0.0, 1.0)
    assert pairs["low"] < -0.5 and pairs["high"] > 0.5  # the seeds' paired intervals on 4 tasks
    page = client.get(f"/runs/compare?{query}").text
    assert "[0.000, 0.000]" not in page and "[+0.000, +0.000]" not in page


def test_whale_compare_prints_intervals_and_the_paired_line(store, workbench, tmp_path):
    a, _ = scored_run(store, "a", passing=set(range(12)))
    b, _ = scored_run(store, "b", passing=set(range(12)))  # the same tasks pass: no difference
    env = {"WHALE_HOME": str(workbench.settings.home), "COLUMNS": "200"}
    proc = whale("compare", str(a.id), str(b.id), "--plot", str(tmp_path / "c.png"), env=env)
    assert proc.returncode == 0, proc.stderr
    caption = " ".join(proc.stdout.split())
    assert "[lo, hi]: 95% interval over the test tasks" in caption
    assert f"#{b.id} vs #{a.id}: final +0.000" in proc.stdout and "p = 1" in proc.stdout
    rows = json.loads(
        whale(
            "compare", str(a.id), str(b.id), "--json", "--plot", str(tmp_path / "d.png"), env=env
        ).stdout
    )["runs"]
    assert rows[1]["paired"]["p_value"] == 1.0 and rows[0]["final_ci"][0] < 0.5
    assert (tmp_path / "c.png").stat().st_size > 10_000
    with workbench.session() as s:
        assert s.get(Metric, 1).evaluation_id is not None


def test_the_headline_is_chosen_on_the_harness_split_not_on_test(store, workbench, client):  # noqa: F811
    """Two pairs tested: the one better on the harness split is worse on test. The compare
    table leads with the first; the maximum over test points is shown beside it, labelled."""
    run = store.write(Run(name="peek", kind="experiment", domain="arith", status="done"))
    checkpoint = store.checkpoint()
    for i, (validation, test) in enumerate([(0.8, 0.4), (0.5, 0.7)]):
        harness = store.harness(run, name=f"h{i}.py")
        for split, score in (("harness", validation), ("test", test)):
            e = store.write(
                Evaluation(
                    run_id=run.id,
                    harness_id=harness.id,
                    checkpoint_id=checkpoint.id,
                    split=split,
                    k=1,
                    n_tasks=4,
                    status="done",
                    mean_at_k=score,
                )
            )
        store.write(
            Metric(
                run_id=run.id,
                series="test/mean@k",
                x=i,
                rollouts=10 * (i + 1),
                y=test,
                evaluation_id=e.id,
            )
        )
    with workbench.session() as s:
        (row,) = compare_runs(s, [run.id])
    assert (row["selected"], row["selected_by"], row["rollouts_to_selected"]) == (
        0.4,
        "harness split",
        10,
    )
    assert row["best"] == 0.7  # the maximum over test points: chosen on test
    page = client.get(f"/runs/compare?ids={run.id}").text
    assert "selected test" in page and "max over test" in page and "by harness split" in page


def test_a_seed_group_is_drawn_as_its_mean_with_a_band_over_seeds():
    from app.read.compare import seed_bands  # the PNG and the compare page both draw these

    runs = [
        Run(id=i, name=f"g seed {i}", kind="experiment", domain="arith", status="done",
            config={"group": {"name": "g", "seeds": [1, 2, 3]}} if i else {})
        for i in range(4)
    ]  # fmt: skip
    curves = [[(0, 0.1, None, None)]] + [
        [(0, 0.2, None, None), (10 * i, y, None, None)] for i, y in ((1, 0.5), (2, 0.6), (3, 0.7))
    ]  # fmt: skip
    (band,) = seed_bands(runs, curves)  # run 0 is in no group
    assert (band["group"], band["runs"], band["n_seeds"]) == ("g", [1, 2, 3], 3)
    assert band["label"] == "g: mean of 3 seeds"
    first, second = band["points"]
    assert first["x"] == 0 and first["mean"] == pytest.approx(0.2)
    assert first["low"] == pytest.approx(first["high"])  # the seeds agree
    assert second["x"] == 20 and abs(second["mean"] - 0.6) < 1e-9
    assert abs((second["high"] - second["mean"]) - 0.2484) < 1e-3


def test_the_paired_baseline_is_the_oldest_run_unless_one_is_chosen(
    store,
    workbench,
    client,  # noqa: F811
    tmp_path,
):
    old, _ = scored_run(store, "old", passing=set(range(6)))  # 6 of 24
    new, _ = scored_run(store, "new", passing=set(range(6)) | set(range(10, 22)))  # 18 of 24
    ids = f"ids={new.id}&ids={old.id}"  # the newer run ticked first

    data = client.get(f"/api/runs/compare?{ids}").json()
    assert data["baseline"] == old.id
    by = {r["id"]: r["paired"] for r in data["runs"]}
    assert by[old.id] is None
    assert (by[new.id]["against"], by[new.id]["difference"]) == (old.id, 0.5)

    chosen = client.get(f"/api/runs/compare?{ids}&baseline={new.id}").json()
    by = {r["id"]: r["paired"] for r in chosen["runs"]}
    assert by[new.id] is None
    assert (by[old.id]["against"], by[old.id]["difference"]) == (new.id, -0.5)
    page = client.get(f"/runs/compare?{ids}&baseline={new.id}").text
    assert f'<option value="{new.id}" selected>' in page and f"final vs #{new.id}" in page

    refused = client.get(f"/runs/compare?{ids}&baseline=999")
    assert refused.status_code == 422
    assert "baseline: run 999 is not one of the compared runs" in error_detail(refused)

    # `whale compare` pairs with the same run by default, or with --baseline
    env = {"WHALE_HOME": str(workbench.settings.home), "COLUMNS": "200"}
    plot = str(tmp_path / "c.png")
    shown = whale("compare", str(new.id), str(old.id), "--plot", plot, env=env)
    assert f"#{new.id} vs #{old.id}: final +0.500" in shown.stdout, shown.stderr
    args = ("compare", str(new.id), str(old.id), "--plot", plot, "--json")
    answer = json.loads(whale(*args, "--baseline", str(new.id), env=env).stdout)
    assert answer["baseline"] == new.id
    assert [r["paired"] and r["paired"]["against"] for r in answer["runs"]] == [None, new.id]
    wrong = whale(*args, "--baseline", "999", env=env)
    assert wrong.returncode == 2 and "not one of the compared runs" in wrong.stderr
