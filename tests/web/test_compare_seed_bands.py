"""The compare page draws a seed group (`whale run --seeds`) as its PNG does: one curve, the mean
over its seeds at each test point, shaded with the 95% t interval over seeds, its seeds faint
beneath it; a run in no group draws as before. The JSON carries the band it draws."""

import html
import re
import statistics

import pytest

from app.db.schema import Metric, Run

T_975_DF2 = 4.302652729911275  # Student's t, 97.5% quantile, two degrees of freedom (3 seeds)
# test mean@k of each seed at its three test points; the seeds' rollouts differ a little
SEEDS = {0: [0.2, 0.4, 0.5], 1: [0.3, 0.5, 0.7], 2: [0.1, 0.6, 0.6]}
LABEL = "arith-seeds: mean of 3 seeds"


def seed_group(store) -> tuple[list[Run], Run]:
    group = {"name": "arith-seeds", "seeds": list(SEEDS)}
    seeds = [
        store.write(
            Run(
                name=f"arith-seeds seed {seed}",
                kind="experiment",
                strategy="whale",
                domain="arith",
                status="done",
                config={"group": group, "seed": seed},
            )
        )
        for seed in SEEDS
    ]
    solo = store.write(
        Run(name="solo", kind="experiment", strategy="weight_only", domain="arith", status="done")
    )
    store.write(
        *[
            Metric(run_id=run.id, series="test/mean@k", x=j, rollouts=100 * (j + 1) + seed, y=y)
            for run, (seed, ys) in zip(seeds, SEEDS.items())
            for j, y in enumerate(ys)
        ],
        *[
            Metric(run_id=solo.id, series="test/mean@k", x=j, rollouts=150 * (j + 1), y=y)
            for j, y in enumerate([0.35, 0.45])
        ],
    )
    return seeds, solo


def test_a_seed_group_is_one_curve_with_a_band_over_its_seeds(store, client):
    seeds, solo = seed_group(store)
    query = "&".join(f"ids={run.id}" for run in [*seeds, solo])

    (band,) = client.get(f"/api/runs/compare?{query}").json()["seed_bands"]
    assert (band["group"], band["n_seeds"], band["label"]) == ("arith-seeds", 3, LABEL)
    assert band["runs"] == [run.id for run in seeds]
    assert len(band["points"]) == 3
    for j, point in enumerate(band["points"]):
        ys = [SEEDS[seed][j] for seed in SEEDS]
        mean, half = statistics.mean(ys), T_975_DF2 * statistics.stdev(ys) / 3**0.5
        assert point["x"] == pytest.approx(100 * (j + 1) + 1)  # the seeds' mean rollouts
        assert point["mean"] == pytest.approx(mean)
        assert (point["low"], point["high"]) == (  # a score's band stays inside [0, 1]
            pytest.approx(max(mean - half, 0.0)),
            pytest.approx(min(mean + half, 1.0)),
        )

    page = client.get(f"/runs/compare?{query}").text
    svg = re.search(r'<svg class="chart".*?</svg>', page, re.S).group(0)
    assert svg.count('<polygon class="seed-band"') == 1
    # the mean's line: its dots carry the means, the title says once what every band is
    title = re.search(r'class="chart-title"[^>]*>(.*?)<', svg).group(1)
    assert title.endswith("(shaded: 95% t interval over seeds)")
    tips = [html.unescape(t) for t in re.findall(r"<title>(.*?)</title>", svg, re.S)]
    for point in band["points"]:
        assert any(t.startswith(f"{LABEL}: {point['mean']:.4g} at {point['x']:g}") for t in tips)
    legend = [html.unescape(t) for t in re.findall(r'class="chart-legend"[^>]*>(.*?)<', svg)]
    assert LABEL in legend  # whole: not cut to fit a column
    # the seeds faint beneath it, out of the legend; the run in no group drawn as before
    assert svg.count('class="chart-line faint"') == 3
    assert svg.count('<polyline class="chart-line" ') == 2  # the group's mean and the solo run
    assert f"#{solo.id} weight_only: solo" in legend
    assert not any(f"#{run.id} " in t for t in legend for run in seeds)
    assert "95% t interval over seeds" in page  # the note under the chart


def test_a_group_of_one_seed_among_the_runs_draws_as_a_plain_run(store, client):
    seeds, solo = seed_group(store)
    data = client.get(f"/api/runs/compare?ids={seeds[0].id}&ids={solo.id}").json()
    assert data["seed_bands"] == []
    svg = client.get(f"/runs/compare?ids={seeds[0].id}&ids={solo.id}").text
    assert "seed-band" not in svg and "chart-line faint" not in svg


def test_seed_groups_are_paired_by_seed_against_the_baseline_runs_group(store, client):
    """Two strategies under seeds 0-2: each group's selected score minus the baseline group's,
    seed s against seed s whatever order the runs come in, with the t interval over seeds and
    the paired t-test; the page shows the same figures."""
    from scipy import stats

    finals = {"whale": {0: 0.50, 1: 0.70, 2: 0.60}, "harness_only": {2: 0.55, 0: 0.30, 1: 0.60}}
    # two more strategies: 12 runs in 4 groups, 4 curves, which the page shows (at most 10 curves)
    finals |= {"weight_only": {0: 0.1, 1: 0.1, 2: 0.2}, "stagewise": {0: 0.4, 1: 0.5, 2: 0.6}}
    runs = {}
    for strategy, by_seed in finals.items():
        group = {"name": f"stories-{strategy}", "seeds": [0, 1, 2]}
        for seed, y in by_seed.items():  # harness_only's seeds written out of order
            run = store.write(
                Run(
                    name=f"stories-{strategy} seed {seed}",
                    kind="experiment",
                    strategy=strategy,
                    domain="stories",
                    status="done",
                    config={"group": group, "experiment": {"seed": seed}},
                )
            )
            store.write(Metric(run_id=run.id, series="test/mean@k", x=0, rollouts=256, y=y))
            runs[strategy, seed] = run.id
    ids = list(runs.values())
    query = "&".join(f"ids={i}" for i in ids) + f"&baseline={runs['whale', 0]}"

    base, other, *_ = client.get(f"/api/runs/compare?{query}").json()["groups"]
    assert base["group"] == "stories-whale" and base["vs_baseline"] is None
    pairs = other["vs_baseline"]
    diffs = [finals["harness_only"][s] - finals["whale"][s] for s in (0, 1, 2)]  # -0.2, -0.1, -0.05
    mean, half = statistics.mean(diffs), T_975_DF2 * statistics.stdev(diffs) / 3**0.5
    assert (pairs["against"], pairs["seeds"]) == ("stories-whale", [0, 1, 2])
    assert pairs["difference"] == pytest.approx(mean)
    assert (pairs["low"], pairs["high"]) == (pytest.approx(mean - half), pytest.approx(mean + half))
    p = stats.ttest_rel(
        [finals["harness_only"][s] for s in (0, 1, 2)], list(finals["whale"].values())
    )
    assert pairs["p_value"] == pytest.approx(p.pvalue)
    assert "paired by seed over 3 seeds" in pairs["design"]

    page = client.get(f"/runs/compare?{query}").text
    table = re.search(r'<table id="seed-groups">.*?</table>', page, re.S).group(0)
    assert "selected vs stories-whale, paired by seed" in table
    rows = re.findall(r"<tr><td>(stories-[^<]+)</td>.*?</tr>", table, re.S)
    assert rows == [f"stories-{s}" for s in finals]
    row = re.search(r"<tr><td>stories-harness_only</td>.*?</tr>", table, re.S).group(0)
    cell = html.unescape(re.sub(r"(<[^>]+>|\s)+", " ", row))
    assert f"{mean:+.3f} [{mean - half:+.3f}, {mean + half:+.3f}]" in cell
    assert f"p {p.pvalue:.3g}, 3 seeds" in cell
