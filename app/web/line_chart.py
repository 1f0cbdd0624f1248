"""Line charts drawn on the server as inline SVG: a frame, ticks, axis labels, one polyline per
series and a legend. No JavaScript: the markup goes straight into the page, and a fragment that
htmx refreshes brings its chart up to date with it.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

# One color per series, in order; the first matches the links, the second the "pass" green.
# Ten, so ten runs overlaid on the compare page stay apart.
COLORS = (
    "#0969da",
    "#1a7f37",
    "#bc4c00",
    "#8250df",
    "#cf222e",
    "#1b7c83",
    "#9a6700",
    "#bf3989",
    "#24292f",
    "#8c959f",
)
DASHES = ("6 4", "2 3", "10 3 2 3")
WIDTH, HEIGHT = 520, 220
LEFT, RIGHT, TOP, BOTTOM = 52, 14, 26, 40  # room for tick labels, title and axis label
MAX_MARKERS = 60  # above this many points a dot per point is clutter: the line alone
CHAR_W = 6.5  # estimated width of a legend or title character, in pixels
LEGEND_ROW, LEGEND_COLUMNS = 16, 2

Point = tuple[float, ...]  # (x, y), or (x, y, low, high): y's interval, drawn as an error bar
Link = tuple[str | None, str]  # a point's link (what it measured) and more tooltip lines
Extent = tuple[float | None, float | None]  # what an axis covers at least; None: fit the points


@dataclass(frozen=True)
class Band:
    """An x range shaded behind the lines (a phase of a run): `css` picks its tint, `label` is
    written in it where it fits (else `short`, else nothing), `title` is its tooltip."""

    x0: float
    x1: float
    css: str
    label: str
    short: str = ""
    title: str = ""


def nice_ticks(lo: float, hi: float, count: int = 5, min_step: float = 0.0) -> list[float]:
    """Round tick values (steps of 1, 2, 2.5 or 5 times a power of ten, at least `min_step`)
    from at or below `lo` to at or above `hi`; `hi` must be above `lo`."""
    raw = (hi - lo) / (count - 1)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    step = max(step, min_step)
    first = math.floor(lo / step + 1e-9) * step
    last = math.ceil(hi / step - 1e-9) * step
    return [first + i * step for i in range(round((last - first) / step) + 1)]


def axis_ticks(values: list[float], extent: Extent, min_step: float = 0.0) -> list[float]:
    """Ticks of an axis showing every value and at least `extent` (None: fit the values)."""
    low, high = extent
    lo = min(values) if low is None else min(low, *values)
    hi = max(values) if high is None else max(high, *values)
    if hi <= lo:  # a single value: give it room, on the side that is not pinned
        pad = max(abs(lo) * 0.1, min_step) or 0.5
        if low is None and high is None:
            lo, hi = lo - pad, hi + pad
        elif high is None:
            hi = lo + pad
        else:
            lo = hi - pad
    return nice_ticks(lo, hi, min_step=min_step)


def tick_label(value: float, step: float) -> str:
    """Enough decimals to tell neighbouring ticks apart, no more."""
    decimals = 0
    while decimals < 6 and abs(step * 10**decimals - round(step * 10**decimals)) > 1e-6:
        decimals += 1
    return f"{value:,.{decimals}f}"


def _text(x: float, y: float, body: str, css: str, anchor: str = "middle", **attrs: str) -> str:
    extra = "".join(f' {k}="{v}"' for k, v in attrs.items())
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" class="{css}" text-anchor="{anchor}"{extra}>'
        f"{escape(body)}</text>"
    )


def _stroke(i: int) -> str:
    """The i-th series' line style: its color; after the first, thinner and dashed, so a curve
    lying on top of another still lets it show."""
    dashes = DASHES[(i - 1) % len(DASHES)]
    style = f' stroke-width="1.6" stroke-dasharray="{dashes}"' if i else ' stroke-width="2.6"'
    return f'stroke="{COLORS[i % len(COLORS)]}"{style}'


class _Plot:
    """The plot area and the mapping from data to its pixels."""

    def __init__(self, xs: list[float], ys: list[float]):
        self.xs, self.ys = xs, ys
        self.w, self.h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def px(self, x: float) -> float:
        return LEFT + (x - self.xs[0]) / (self.xs[-1] - self.xs[0]) * self.w

    def py(self, y: float) -> float:
        return TOP + self.h - (y - self.ys[0]) / (self.ys[-1] - self.ys[0]) * self.h

    def axes(self, x_label: str, y_label: str) -> list[str]:
        """Grid lines and labels for the y ticks, tick marks and labels for x, axis titles."""
        parts = []
        for y in self.ys:
            parts.append(
                f'<line class="chart-grid" x1="{LEFT}" x2="{LEFT + self.w}" '
                f'y1="{self.py(y):.1f}" y2="{self.py(y):.1f}"/>'
            )
            parts.append(
                _text(
                    LEFT - 6,
                    self.py(y) + 4,
                    tick_label(y, self.ys[1] - self.ys[0]),
                    "chart-tick",
                    anchor="end",
                )
            )
        bottom = TOP + self.h
        for x in self.xs:
            parts.append(
                f'<line class="chart-axis" x1="{self.px(x):.1f}" x2="{self.px(x):.1f}" '
                f'y1="{bottom}" y2="{bottom + 4}"/>'
            )
            parts.append(
                _text(self.px(x), bottom + 16, tick_label(x, self.xs[1] - self.xs[0]), "chart-tick")
            )
        middle = TOP + self.h / 2
        parts.append(_text(LEFT + self.w / 2, bottom + 34, x_label, "chart-label"))
        parts.append(
            _text(12, middle, y_label, "chart-label", transform=f"rotate(-90 12 {middle:.1f})")
        )
        return parts

    def band(self, band: Band) -> list[str]:
        """A shaded column over the plot's height, its label at the top where it fits."""
        x0, x1 = self.px(max(band.x0, self.xs[0])), self.px(min(band.x1, self.xs[-1]))
        if x1 - x0 < 0.5:
            return []
        tip = escape(band.title or band.label)
        parts = [
            f'<rect class="phase-band {band.css}" x="{x0:.1f}" y="{TOP}" width="{x1 - x0:.1f}" '
            f'height="{self.h}" data-x0="{band.x0:g}" data-x1="{band.x1:g}" '
            f'aria-label="{escape(band.label)}"><title>{tip}</title></rect>'
        ]
        room = x1 - x0 - 6
        text = next(
            (t for t in (band.label, band.short) if t and CHAR_W * 0.85 * len(t) <= room), ""
        )
        if text:
            parts.append(_text(x0 + 3, TOP + 11, text, f"phase-band-label {band.css}", "start"))
        return parts

    def line(
        self, i: int, label: str, points: Sequence[Point], links: Sequence[Link] | None = None
    ) -> list[str]:
        coords = " ".join(f"{self.px(p[0]):.1f},{self.py(p[1]):.1f}" for p in points)
        parts = [f'<polyline class="chart-line" points="{coords}" {_stroke(i)}/>']
        color = COLORS[i % len(COLORS)]
        for x, _, low, high in (p for p in points if len(p) == 4 and p[2] is not None):
            parts.append(
                f'<line class="chart-ci" x1="{self.px(x):.1f}" x2="{self.px(x):.1f}" '
                f'y1="{self.py(low):.1f}" y2="{self.py(high):.1f}" stroke="{color}"/>'
            )
        if len(points) <= MAX_MARKERS:  # a dot per point, its values as a hover tooltip
            for j, p in enumerate(points):
                x, y = p[0], p[1]
                ci = f" [{p[2]:.3g}, {p[3]:.3g}] 95%" if len(p) == 4 and p[2] is not None else ""
                href, note = links[j] if links else (None, "")
                title = f"{label}: {y:.4g}{ci} at {x:g}" + (f"\n{note}" if note else "")
                dot = (
                    f'<circle cx="{self.px(x):.1f}" cy="{self.py(y):.1f}" r="{4 if href else 2.5}" '
                    f'fill="{color}"><title>{escape(title)}</title></circle>'
                )
                # a point that measured something opens it; the bigger dot is the target
                parts.append(
                    f'<a class="chart-point" href="{escape(href)}">{dot}</a>' if href else dot
                )
        return parts


def _frame() -> str:
    return (
        f'<rect class="chart-frame" x="{LEFT}" y="{TOP}" width="{WIDTH - LEFT - RIGHT}" '
        f'height="{HEIGHT - TOP - BOTTOM}"/>'
    )


def _legend_rows(labels: list[str]) -> list[str]:
    """Label and line sample per series in rows under the plot, LEGEND_COLUMNS to a row."""
    parts, column_w = [], (WIDTH - LEFT) / LEGEND_COLUMNS
    chars = int(column_w / CHAR_W) - 5
    for i, label in enumerate(labels):
        row, column = divmod(i, LEGEND_COLUMNS)
        x, y = LEFT + column * column_w, HEIGHT + row * LEGEND_ROW + 4
        parts.append(
            f'<line class="chart-line" x1="{x:.1f}" x2="{x + 22:.1f}" y1="{y - 4}" '
            f'y2="{y - 4}" {_stroke(i)}/>'
        )
        text = label if len(label) <= chars else label[: chars - 1] + "\u2026"
        parts.append(_text(x + 28, y, text, "chart-legend", anchor="start"))
    return parts


def _legend(labels: list[str]) -> list[str]:
    """Label and line sample per series, right-aligned above the plot (text width estimated)."""
    parts, right = [], WIDTH - RIGHT
    for i, label in reversed(list(enumerate(labels))):
        parts.append(_text(right, 15, label, "chart-legend", anchor="end"))
        right -= CHAR_W * len(label) + 6
        parts.append(
            f'<line class="chart-line" x1="{right - 18:.1f}" x2="{right:.1f}" y1="11" '
            f'y2="11" {_stroke(i)}/>'
        )
        right -= 32
    return parts


def line_chart(
    series: dict[str, Sequence[Point]],
    title: str,
    x_label: str,
    y_label: str,
    x_extent: Extent = (None, None),
    y_extent: Extent = (None, None),
    integer_x: bool = False,
    links: dict[str, Sequence[Link]] | None = None,
    bands: Sequence[Band] = (),
) -> Markup:
    """An SVG chart of `series` (label -> points in x order); `links` gives a series' points
    a link and more tooltip text each; `bands` are x ranges shaded behind the lines.

    The extents pin what the axes cover at least, e.g. 0..1 for rates, so curves from different
    pages compare; `integer_x` keeps x ticks on whole numbers (steps, rollout counts).
    """
    # The legend goes beside the title when it fits there, else in rows under the plot.
    legend_w = sum(CHAR_W * len(name) + 38 for name in series)
    fits = len(series) < 2 or LEFT + CHAR_W * len(title) + 16 + legend_w <= WIDTH - RIGHT
    rows = 0 if fits else -(-len(series) // LEGEND_COLUMNS)
    height = HEIGHT + rows * LEGEND_ROW + (8 if rows else 0)
    parts = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {height}" role="img" '
        f'aria-label="{escape(title)}" xmlns="http://www.w3.org/2000/svg">',
        f"<title>{escape(title)}</title>",
        _text(LEFT, 15, title, "chart-title", anchor="start"),
    ]
    points = [p for pts in series.values() for p in pts]
    if not points:
        middle = (LEFT + WIDTH - RIGHT) / 2, (TOP + HEIGHT - BOTTOM) / 2
        return Markup(
            "".join([*parts, _frame(), _text(*middle, "no points yet", "chart-empty"), "</svg>"])
        )
    # the x axis covers the bands too: a phase still running reaches past the last point
    xs = [p[0] for p in points] + [x for b in bands for x in (b.x0, b.x1)]
    plot = _Plot(
        axis_ticks(xs, x_extent, min_step=1 if integer_x else 0),
        axis_ticks([p[1] for p in points], y_extent),
    )
    for band in bands:  # first, so the grid, the lines and their dots lie over the shading
        parts += plot.band(band)
    parts += plot.axes(x_label, y_label)
    parts.append(_frame())
    for i, (label, pts) in enumerate(series.items()):
        parts += plot.line(i, label, pts, (links or {}).get(label))
    if rows:
        parts += _legend_rows(list(series))
    elif len(series) > 1:
        parts += _legend(list(series))
    return Markup("".join(parts) + "</svg>")


@dataclass(frozen=True)
class Mark:
    """A point of a scatter chart: where it is, what it links to, its tooltip, and `css`
    classes saying what it is (its style and its legend entry)."""

    x: float
    y: float
    href: str | None = None
    title: str = ""
    css: str = ""


def scatter_chart(
    marks: Sequence[Mark],
    title: str,
    x_label: str,
    y_label: str,
    path: Sequence[tuple[float, float]] = (),
    legend: Sequence[tuple[str, str]] = (),
    x_extent: Extent = (None, None),
    y_extent: Extent = (None, None),
) -> Markup:
    """An SVG scatter of `marks` on the line chart's axes, with `path` (e.g. a Pareto front, in
    x order) drawn as a line under them; `legend` pairs a mark's css with its meaning, shown
    beside the title. A mark whose css has "chosen" gets a ring around its dot."""
    parts = [
        f'<svg class="chart scatter" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'aria-label="{escape(title)}" xmlns="http://www.w3.org/2000/svg">',
        f"<title>{escape(title)}</title>",
        _text(LEFT, 15, title, "chart-title", anchor="start"),
    ]
    if not marks:
        middle = (LEFT + WIDTH - RIGHT) / 2, (TOP + HEIGHT - BOTTOM) / 2
        return Markup(
            "".join([*parts, _frame(), _text(*middle, "no points yet", "chart-empty"), "</svg>"])
        )
    # left to right, ending at the right edge: an estimated width errs between entries, never
    # between a dot and its meaning
    x = WIDTH - RIGHT - sum(CHAR_W * len(meaning) + 22 for _, meaning in legend) + 10
    for css, meaning in legend:
        parts.append(f'<circle class="scatter-mark {css}" cx="{x + 4:.1f}" cy="11" r="4"/>')
        parts.append(_text(x + 12, 15, meaning, "chart-legend", anchor="start"))
        x += CHAR_W * len(meaning) + 22
    plot = _Plot(
        axis_ticks([m.x for m in marks], x_extent), axis_ticks([m.y for m in marks], y_extent)
    )
    parts += plot.axes(x_label, y_label)
    parts.append(_frame())
    if len(path) > 1:
        coords = " ".join(f"{plot.px(x):.1f},{plot.py(y):.1f}" for x, y in path)
        parts.append(f'<polyline class="scatter-path" points="{coords}"/>')
    # the chosen ones last, so no other dot covers them
    for m in sorted(marks, key=lambda m: "chosen" in m.css.split()):
        cx, cy = plot.px(m.x), plot.py(m.y)
        ring = (
            f'<circle class="scatter-ring" cx="{cx:.1f}" cy="{cy:.1f}" r="8"/>'
            if "chosen" in m.css.split()
            else ""
        )
        dot = f'<circle class="scatter-mark {m.css}" cx="{cx:.1f}" cy="{cy:.1f}" r="4.5"/>'
        body = f"<title>{escape(m.title)}</title>{ring}{dot}"  # the tooltip of ring and dot
        parts.append(
            f'<a class="chart-point" href="{escape(m.href)}">{body}</a>'
            if m.href
            else f'<g class="chart-point">{body}</g>'
        )
    return Markup("".join(parts) + "</svg>")
