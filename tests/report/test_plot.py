"""The comparison figure: a real PNG, a paper-sized one, for every x axis and for ten runs."""

import struct

import pytest
from matplotlib.image import imread

from app.db.schema import Metric, Run
from app.read.compare import seed_bands
from app.read.curves import curve
from app.read.runs import UnknownRuns, get_runs
from app.report.plot import accuracy_figure, plot_accuracy_vs_rollouts, run_colors

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_size(path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == PNG_SIGNATURE and head[12:16] == b"IHDR"
    return struct.unpack(">II", head[16:24])


def assert_figure(path):
    width, height = png_size(path)
    assert 1000 <= width <= 2000 and 700 <= height <= 1600  # 7 inches at 200 dpi, legend below
    pixels = imread(path)  # decodes: the file is whole
    assert pixels.shape[:2] == (height, width)
    assert pixels.std() > 0.05  # something was drawn


# Warnings as errors: matplotlib warns, and still writes a PNG, when the axes collapse.
pytestmark = pytest.mark.filterwarnings("error")


@pytest.mark.parametrize("x", ["rollouts", "weight_steps", "wall_s"])
def test_every_x_axis(session, filled, tmp_path, x):
    path = plot_accuracy_vs_rollouts(
        session, [run.id for run in filled.runs.values()], tmp_path / "figures" / f"{x}.png", x
    )
    assert_figure(path)


def test_ten_runs(session, store, tmp_path):
    ids = []
    for i in range(10):
        strategy = ["whale", "weight_only", "harness_only"][i % 3]
        run = store.write(
            Run(name=f"{strategy} seed {i}", kind="experiment", domain="arith", strategy=strategy)
        )
        store.write(
            *[
                Metric(
                    run_id=run.id,
                    series="test/mean@k",
                    x=r,
                    rollouts=r * 1000,
                    y=min(1.0, 0.2 + 0.05 * r + 0.01 * i),
                    weight_steps=r,
                    wall_s=r * 900.0,
                )
                for r in range(8)
            ]
        )
        ids.append(run.id)
    assert_figure(plot_accuracy_vs_rollouts(session, ids, tmp_path / "ten.png"))


def seeded_runs(store, group_name: str) -> list[int]:
    group = {"name": group_name, "seeds": [0, 1, 2]}
    ids = []
    for seed in range(3):
        run = store.write(
            Run(
                name=f"{group_name} seed {seed}",
                kind="experiment",
                domain="arith",
                config={"group": group},
            )
        )
        store.write(
            *[
                Metric(
                    run_id=run.id,
                    series="test/mean@k",
                    x=r,
                    rollouts=r * 1000 + seed,
                    y=0.2 + 0.1 * r + 0.05 * seed,
                    wall_s=r * 60.0 + seed,
                )
                for r in range(4)
            ]
        )
        ids.append(run.id)
    return ids


@pytest.mark.parametrize("x", ["rollouts", "wall_s"])
def test_a_seed_group_as_its_mean_over_a_band(session, store, tmp_path, x):
    ids = seeded_runs(store, "g")
    assert_figure(plot_accuracy_vs_rollouts(session, ids, tmp_path / "group.png", x))
    # What is drawn, not only that something is: the group's mean as a thick line, over a shaded
    # band from the seeds' interval, both at the seeds' mean score of each test point.
    ax = accuracy_figure(session, ids, x).axes[0]
    (mean_line,) = [line for line in ax.get_lines() if line.get_label().startswith("g")]
    means = [0.2 + 0.1 * r + 0.05 for r in range(4)]  # seeds 0, 1, 2 score +0, +0.05, +0.1
    assert list(mean_line.get_ydata()) == pytest.approx(means)
    assert mean_line.get_linewidth() > 2
    (band,) = ax.collections[-1:]  # fill_between: the one shaded area
    vertices = band.get_paths()[0].vertices
    for r, mean in enumerate(means):
        x_r = mean_line.get_xdata()[r]
        ys = vertices[abs(vertices[:, 0] - x_r) < 1e-9][:, 1]
        assert ys.min() < mean - 0.05 and ys.max() > mean + 0.05  # a real spread around it


def test_the_seeds_of_a_group_share_its_colour(session, store, filled):
    """Five groups of three seeds read as five colours, not fifteen: a seed's colour says its
    group; a run in no group keeps a colour of its own."""
    solo = filled.runs["whale"].id
    ids = seeded_runs(store, "a") + [solo] + seeded_runs(store, "b")
    runs = get_runs(session, ids)
    bands = seed_bands(runs, [curve(session, run, "rollouts")[0] for run in runs])
    colors, members = run_colors(runs, bands)
    a, b = ids[:3], ids[4:]
    assert members == set(a + b)
    assert len({colors[i] for i in a}) == len({colors[i] for i in b}) == 1
    assert len({colors[a[0]], colors[b[0]], colors[solo]}) == 3


def test_refuses_unknown_x_and_runs(session, filled, tmp_path):
    with pytest.raises(ValueError, match="weight_steps"):
        plot_accuracy_vs_rollouts(session, [filled.runs["whale"].id], tmp_path / "a.png", "x")
    with pytest.raises(UnknownRuns):
        plot_accuracy_vs_rollouts(session, [12345], tmp_path / "b.png")
    assert not list(tmp_path.glob("*.png"))
