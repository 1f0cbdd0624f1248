"""The charts the training pages draw: which metric series, against what, with which labels.

The data functions return the points as the API gives them ({x, y, rollouts}); these pick the
x each chart needs and hand the result to the generic line chart.
"""
from typing import Any

from markupsafe import Markup

from app.web.chart import line_chart

Points = list[dict[str, Any]]


def loss_chart(points: Points, step: int) -> Markup:
    """A training job's loss per batch; x runs from the step to the next as its batches end."""
    return line_chart({"loss": [(p["x"], p["y"]) for p in points]}, "training loss per batch",
                      "step (fraction of its batches done)", "loss",
                      x_extent=(step, step + 1))  # fmt: skip


def test_curve_chart(curves: dict[str, Points], rollouts_used: int = 0) -> Markup:
    """Test mean@k against the training rollouts used before it: the cost of each gain. The x
    axis reaches the rollouts used so far, so a run between test points shows how far it got."""
    points = [(p["rollouts"], p["y"]) for p in curves.get("test/mean@k", [])]
    return line_chart({"test mean@k": points}, "test mean@k", "training rollouts used",
                      "mean@k", x_extent=(0, rollouts_used or None), y_extent=(0, 1),
                      integer_x=True)  # fmt: skip


def step_curves_chart(curves: dict[str, Points]) -> Markup:
    """Per RFT step: the share of sampled rollouts accepted, and their mean reward."""
    return line_chart({
        "accept rate": [(p["x"], p["y"]) for p in curves.get("train/accept_rate", [])],
        "mean reward": [(p["x"], p["y"]) for p in curves.get("train/mean_reward", [])],
    }, "sampling per step", "step", "rate", x_extent=(0, None), y_extent=(0, 1),
        integer_x=True)  # fmt: skip


def best_success_chart(points: Points) -> Markup:
    """A harness phase: the best success rate on the frontier after each iteration."""
    return line_chart({"best success": [(p["x"], p["y"]) for p in points]},
                      "harness split: best success on the frontier", "iteration", "success",
                      x_extent=(0, None), y_extent=(0, 1), integer_x=True)  # fmt: skip
