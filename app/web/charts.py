"""The charts the training pages draw: which metric series, against what, with which labels.

The data functions return the points as the API gives them ({x, y, rollouts}); these pick the
x each chart needs and hand the result to the generic line chart.
"""

from typing import Any

from markupsafe import Markup

from app.read.curves import UNSCORED, x_axis
from app.web.line_chart import Band, Mark, Spread, line_chart, scatter_chart

Points = list[dict[str, Any]]


def loss_chart(points: Points, step: int) -> Markup:
    """A training job's loss per batch; x runs from the RFT steps done before it (`step`, the
    store's 0-based number) to one more as its batches end: step N ends at x = N, as on the
    run page's charts."""
    return line_chart(
        {"loss": [(p["x"], p["y"]) for p in points]},
        "training loss per batch",
        "RFT steps of the run done (with its batches)",
        "loss",
        x_extent=(step, step + 1),
    )


def step_curves_chart(curves: dict[str, Points]) -> Markup:
    """Per RFT step: the share of sampled rollouts accepted, and their mean reward."""
    return line_chart(
        {
            "accept rate": [(p["x"], p["y"]) for p in curves.get("train/accept_rate", [])],
            "mean reward": [(p["x"], p["y"]) for p in curves.get("train/mean_reward", [])],
        },
        "sampling per step",
        "step",
        "rate",
        x_extent=(0, None),
        y_extent=(0, 1),
        integer_x=True,
    )


def best_success_chart(points: Points) -> Markup:
    """A harness phase: the best success rate on the frontier after each iteration."""
    return line_chart(
        {"best success": [(p["x"], p["y"]) for p in points]},
        "harness split: best success on the frontier",
        "iteration",
        "success",
        x_extent=(0, None),
        y_extent=(0, 1),
        integer_x=True,
    )


def candidate_chart(lines: Points, final: bool) -> Markup:
    """A harness phase: each candidate's success (with its 95% interval) over the iterations it
    stayed on the frontier, one line each; the accepted one first, so it is drawn thick and
    solid and named so (`final`: the phase has ended, else "so far"). Each point opens its
    harness."""
    accepted = "accepted" if final else "accepted so far"
    series: dict[str, list[tuple]] = {}
    links: dict[str, list[tuple]] = {}
    for line in sorted(lines, key=lambda line: not line["accepted"]):
        name = f"#{line['harness_id']} {line['name']}"
        name += f" ({accepted})" if line["accepted"] else " (incoming)" if line["incoming"] else ""
        series[name] = [(p["x"], p["y"], p["low"], p["high"]) for p in line["points"]]
        href = f"/harnesses/{line['harness_id']}"
        links[name] = [(href, "on the frontier after this iteration")] * len(line["points"])
    return line_chart(
        series,
        "harness split: each candidate's success",
        "iteration (a line lasts while its candidate is on the frontier)",
        "success",
        x_extent=(0, None),
        y_extent=(0, 1),
        integer_x=True,
        links=links,
    )


def point_link(p: dict[str, Any]) -> tuple[str | None, str]:
    """Where a test point leads (its evaluation's rollouts) and what its tooltip adds: the
    harness, checkpoint, k and split it measured, and its rollouts that scored nothing."""
    if p.get("harness_id") is None:
        return None, ""
    facts = f"harness {p['harness_id']}, checkpoint {p['checkpoint_id']}, k={p['k']}, {p['split']} split"
    unscored = ", ".join(f"{p[f'n_{s}']} {s}" for s in UNSCORED if p.get(f"n_{s}"))
    note = facts + (f"\nrollouts that scored nothing: {unscored}" if unscored else "")
    if p.get("inherited"):  # a fork's curve before its fork point (app/read/forks.py)
        note += f"\nrun {p['run_id']}'s, before the fork"
    return f"/rollouts?evaluation={p['evaluation_id']}", note


def phase_band(span: dict[str, Any], scale: float) -> Band:
    """A phase as a shaded band, named by the run's numbering ("weight phase 2", short "W2")."""
    what = "RFT" if span["kind"] == "weight" else "search"
    ended = span["ended_reason"] or span["status"]
    title = f"{span['label']} ({what}): {span['rollouts']:,} rollouts, {ended}"
    return Band(
        span["x0"] / scale,
        span["x1"] / scale,
        f"phase-band-{span['kind']}",
        span["label"],
        f"{'W' if span['kind'] == 'weight' else 'H'}{span['round']}",
        title,
    )


def runs_test_chart(
    curves: dict[str, Points],
    x: str,
    title: str = "test mean@k",
    phases: Points = (),
    seed_bands: Points = (),
) -> Markup:
    """Test mean@k of one or more runs (label -> points) against rollouts used, RFT steps or
    wall time; wall time in the unit that keeps the ticks short. Each point opens the rollouts
    of the evaluation it plots. `phases` (a run's phase spans on this x) are shaded behind the
    curves, so a reader sees which phase moved them. `seed_bands` (app/read/compare.py): each
    seed group as its mean over a band, in the colour and place of its first seed; its seeds'
    own curves stay, faint, so a reader still sees each and opens its points."""
    longest = max(
        [p["x"] for points in curves.values() for p in points] + [p["x1"] for p in phases],
        default=0,
    )
    scale, x_label = x_axis(x, longest)
    member_of = {name: band for band in seed_bands for name in band["curves"]}
    series: dict[str, list[tuple]] = {}
    links: dict[str, list[tuple]] = {}
    faint: dict[str, str] = {}
    for name, points in curves.items():
        band = member_of.get(name)
        if band is not None:
            mean = band["label"]
            if mean not in series:  # first in the order: the group takes its first seed's colour
                series[mean] = [(p["x"] / scale, p["mean"]) for p in band["points"]]
                links[mean] = [
                    (None, f"{band['band']}: [{p['low']:.3g}, {p['high']:.3g}]")
                    for p in band["points"]
                ]
            faint[name] = mean
        series[name] = [(p["x"] / scale, p["y"], p.get("low"), p.get("high")) for p in points]
        links[name] = [point_link(p) for p in points]
    spreads = [
        Spread(
            band["label"],
            [(p["x"] / scale, p["low"], p["high"]) for p in band["points"]],
            "seed-band",
            f"{band['group']}: {band['band']}, runs " + ", ".join(f"#{i}" for i in band["runs"]),
        )
        for band in seed_bands
    ]
    return line_chart(
        series,
        title,
        x_label,
        "mean@k",
        x_extent=(0, None),
        y_extent=(0, 1),
        integer_x=x != "wall_s",
        links=links,
        bands=[phase_band(p, scale) for p in phases],
        spreads=spreads,
        faint=faint,
    )


def harness_success_chart(points: Points) -> Markup:
    """Best harness-split success after each search iteration, across the run's harness phases."""
    return line_chart(
        {"best success": [(p["x"], p["y"]) for p in points]},
        "harness split: best success",
        "search iteration (all phases)",
        "success",
        x_extent=(0, None),
        y_extent=(0, 1),
        integer_x=True,
    )


def pareto_chart(pareto: dict[str, Any]) -> Markup:
    """A harness phase's candidates as success against mean turns: the Pareto front it selects
    on (success up, turns down) joined by a line, the harness it chose ringed; each point
    opens its harness."""
    chosen_text = "chosen at the phase end" if pareto["final"] else "accepted so far"
    marks = []
    for p in pareto["points"]:
        what = [
            w
            for w, yes in (
                ("incoming", p["incoming"]),
                ("on the Pareto front", p["on_front"]),
                (chosen_text, p["chosen"]),
            )
            if yes
        ]
        css = " ".join(c for c, yes in (("front", p["on_front"]), ("chosen", p["chosen"])) if yes)
        marks.append(
            Mark(
                p["mean_turns"],
                p["success"],
                f"/harnesses/{p['harness_id']}",
                f"#{p['harness_id']} {p['name']}: success {p['success']:.3f}, "
                f"{p['mean_turns']:.2f} turns" + (f"\n{', '.join(what)}" if what else ""),
                css or "dominated",
            )
        )
    by_id = {p["harness_id"]: p for p in pareto["points"]}
    # a little room left and right, so no point sits on the frame
    turns = [p["mean_turns"] for p in pareto["points"]] or [0.0]
    pad = max((max(turns) - min(turns)) * 0.05, 0.05)
    return scatter_chart(
        marks,
        "success vs. mean turns",
        "mean turns per rollout (fewer is better)",
        "success",
        path=[(by_id[i]["mean_turns"], by_id[i]["success"]) for i in pareto["front"]],
        legend=[("dominated", "dominated"), ("front", "Pareto front"), ("chosen", "chosen")],
        x_extent=(max(min(turns) - pad, 0), max(turns) + pad),
        y_extent=(0, 1),
    )
