"""Test mean@k of several runs against their cost, in one figure fit for a paper."""

from pathlib import Path

from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import EngFormatter, MaxNLocator
from sqlmodel import Session

from app.read.compare import SEED_BAND, seed_bands, selected_point
from app.read.curves import X_LABELS, curve, label, test_k, test_points, x_axis, x_value
from app.read.runs import get_runs

# Colour and marker both change from run to run, so curves stay apart in greyscale too.
MARKERS = "os^DvP*Xhp<>"


def style_axes(ax, x: str, xlabel: str, metric: str) -> None:
    """Title, labels, limits, ticks; after plotting, since fixing a limit stops autoscaling."""
    if x == "rollouts":
        ax.xaxis.set_major_formatter(EngFormatter(sep=""))  # 20k, 1M: no offset text
    elif x == "weight_steps":
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title(f"Test {metric} vs {X_LABELS[x]}")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(f"test {metric}")
    ax.set_ylim(0, 1)
    ax.set_xlim(left=0)
    ax.grid(alpha=0.3, linewidth=0.6)
    ax.spines[["top", "right"]].set_visible(False)
    ax.spines[["left", "bottom"]].set_position(("outward", 4))  # points at 0 stay in sight


def plot_accuracy_vs_rollouts(
    session: Session, run_ids: list[int], path: Path, x: str = "rollouts"
) -> Path:
    """Write a PNG of each run's test mean@k against x (rollouts, weight_steps or wall_s)."""
    fig = accuracy_figure(session, run_ids, x)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, bbox_inches="tight")  # the legend's long lines widen the canvas, uncut
    return path


def accuracy_figure(session: Session, run_ids: list[int], x: str = "rollouts") -> Figure:
    """The figure of plot_accuracy_vs_rollouts, not yet written: its artists are the data."""
    if x not in X_LABELS:
        raise ValueError(f"x must be one of {', '.join(X_LABELS)}, not {x!r}")
    runs = get_runs(session, run_ids)
    curves = [curve(session, run, x) for run in runs]
    ks = {test_k(run) for run in runs}
    metric = f"mean@{ks.pop()}" if len(ks) == 1 and None not in ks else "mean@k"

    bands = seed_bands(runs, [points for points, _ in curves])
    colors, members = run_colors(runs, bands)
    entries = len(runs) - len(members) + len(bands)  # a seed group's seeds share its one line
    columns = 2 if entries > 3 else max(entries, 1)
    legend_rows = -(-entries // columns)
    fig = Figure(figsize=(7, 4 + 0.2 * legend_rows), dpi=200, layout="constrained")
    ax = fig.add_subplot()
    scale, xlabel = x_axis(x, max((p[0] for c, _ in curves for p in c), default=0))
    for i, (run, (points, note)) in enumerate(zip(runs, curves)):
        color, seed = colors[run.id], run.id in members
        xs, ys = [p[0] / scale for p in points], [p[1] for p in points]
        ax.plot(
            xs,
            ys,
            color=color,
            marker=MARKERS[i % len(MARKERS)],
            markersize=3.5 if seed else 5,
            linewidth=0.9 if seed else 1.6,
            alpha=0.5 if seed else 0.9,
            clip_on=False,
            label=("_" if seed else "") + label(run) + note,  # "_": left out of the legend
        )
        # each point's 95% interval (over the test tasks, app/stats.py) as an error bar
        bars = [
            (px, py, low, high)
            for px, py, (_, _, low, high) in zip(xs, ys, points)
            if low is not None
        ]
        if bars and not seed:  # a seed's spread is its group's band
            ax.errorbar(
                [b[0] for b in bars],
                [b[1] for b in bars],
                yerr=[[b[1] - b[2] for b in bars], [b[3] - b[1] for b in bars]],
                fmt="none",
                ecolor=color,
                elinewidth=0.9,
                capsize=2.5,
                alpha=0.6,
                clip_on=False,
            )
        # the point chosen on the harness split (or the final one): the run's headline figure
        chosen, _ = selected_point(session, run, test_points(session, run.id))
        if chosen is not None and x_value(chosen, x) is not None:
            ax.plot(
                [x_value(chosen, x) / scale],
                [chosen.y],
                marker="o",
                markersize=11,
                markerfacecolor="none",
                markeredgecolor=color,
                markeredgewidth=1.4,
                linestyle="none",
                clip_on=False,
            )
    _draw_bands(ax, bands, scale, colors)
    style_axes(ax, x, xlabel, metric)
    # Below the axes, not on them: ten curves leave no free corner. The key to the marks heads it.
    legend = ax.legend(
        loc="upper center",
        bbox_to_anchor=(0.5, -0.14),
        ncols=columns,
        fontsize=8,
        frameon=False,
        title=_key(solo=len(runs) > len(members), groups=bool(bands)),
        title_fontsize=7,
    )
    legend.get_title().set_color("0.4")
    FigureCanvasAgg(fig)
    return fig


def _key(solo: bool, groups: bool) -> str:
    """What the marks mean, heading the legend: only the marks the figure has."""
    marks = ["bars: 95% interval over the test tasks (one run each)"] if solo else []
    marks.append("ring: the point chosen on the harness split (else the final one)")
    if groups:
        marks.append(f"thick: a seed group's mean, shaded: {SEED_BAND}, thin: its seeds")
    return "; ".join(marks)


def run_colors(runs, bands: list[dict]) -> tuple[dict[int, tuple], set[int]]:
    """Each run's colour (run id -> RGB), the seeds of a group sharing one, and the runs that are
    seeds of a group drawn as a band."""
    members = {run_id: band["group"] for band in bands for run_id in band["runs"]}
    keys = list(dict.fromkeys(members.get(run.id, run.id) for run in runs))
    palette = colormaps["tab10" if len(keys) <= 10 else "tab20"].colors
    colors = {
        run.id: palette[keys.index(members.get(run.id, run.id)) % len(palette)] for run in runs
    }
    return colors, set(members)


def _draw_bands(ax, bands: list[dict], scale: float, colors: dict[int, tuple]) -> None:
    """Each seed group as its mean (thick) over a shaded band, in its seeds' colour."""
    for band in bands:
        color = colors[band["runs"][0]]
        xs = [p["x"] / scale for p in band["points"]]
        ax.fill_between(
            xs,
            [p["low"] for p in band["points"]],
            [p["high"] for p in band["points"]],
            color=color,
            alpha=0.15,
            linewidth=0,
        )
        ax.plot(
            xs,
            [p["mean"] for p in band["points"]],
            color=color,
            linewidth=2.6,
            label=band["label"],
        )
