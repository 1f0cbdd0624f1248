"""The server-side SVG line chart: ticks, axes that fit or are pinned, empty charts."""

import re

import pytest

from app.web.line_chart import axis_ticks, line_chart, nice_ticks, tick_label


@pytest.mark.parametrize(
    "lo, hi, ticks",
    [
        (0, 1, [0, 0.25, 0.5, 0.75, 1]),
        (0, 20, [0, 5, 10, 15, 20]),
        (1.62, 1.91, [1.6, 1.7, 1.8, 1.9, 2.0]),
        (0, 512, [0, 200, 400, 600]),
    ],
)
def test_ticks_are_round_and_cover_the_range(lo, hi, ticks):
    assert nice_ticks(lo, hi) == pytest.approx(ticks)


def test_integer_axes_never_tick_between_whole_numbers():
    assert axis_ticks([0, 1, 2], (0, None), min_step=1) == [0, 1, 2]
    assert axis_ticks([0], (0, None), min_step=1) == [0, 1]  # one step: still an axis


def test_pinned_axes_still_show_every_value():
    assert axis_ticks([0.5], (0, 1)) == pytest.approx([0, 0.25, 0.5, 0.75, 1])
    ticks = axis_ticks([-0.5, 1.2], (0, 1))
    assert ticks[0] <= -0.5 and ticks[-1] >= 1.2


def test_tick_labels_have_the_decimals_the_step_needs():
    assert [tick_label(v, 0.25) for v in (0, 0.5)] == ["0.00", "0.50"]
    assert tick_label(1500, 500) == "1,500"


def test_chart_has_a_line_per_series_inside_its_plot():
    svg = line_chart(
        {"a": [(0, 0.1), (1, 0.9)], "b": [(0, 0.5), (1, 0.5)]},
        "rates",
        "step",
        "rate",
        y_extent=(0, 1),
        integer_x=True,
    )
    assert svg.count("<polyline") == 2 and "stroke-dasharray" in svg  # the second is dashed
    for x, y in re.findall(r'<circle cx="([\d.]+)" cy="([\d.]+)"', svg):
        assert 0 <= float(x) <= 520 and 0 <= float(y) <= 220
    assert ">a</text>" in svg and ">b</text>" in svg  # a legend for two series


def test_empty_chart_says_so_and_escapes_its_title():
    svg = line_chart({"loss": []}, "<loss>", "step", "loss")
    assert "no points yet" in svg and "&lt;loss&gt;" in svg and "<polyline" not in svg
