"""Line charts drawn on the server as inline SVG: a frame, ticks, axis labels, one polyline per
series and a legend. No JavaScript: the markup goes straight into the page, and a fragment that
htmx refreshes brings its chart up to date with it.
"""

import math
from collections.abc import Mapping, Sequence
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


@dataclass(frozen=True)
class Spread:
    """A y range shaded around a line, point by point (an interval over seeds), where a Band
    shades an x range: `series` is the label of the line it belongs to (it takes its colour),
    `points` are (x, low, high) in x order, `css` names it, `title` is its tooltip."""

    series: str
    points: Sequence[tuple[float, float, float]]
    css: str = "spread"
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


def _stroke(i: int, solid: bool = False) -> str:
    """The i-th series' line style: its color; after the first, thinner and dashed, so a curve
    lying on top of another still lets it show. `solid`: the first's, for a line with a spread
    (its band already sets it apart)."""
    dashes = DASHES[(i - 1) % len(DASHES)]
    thin = i and not solid
    style = f' stroke-width="1.6" stroke-dasharray="{dashes}"' if thin else ' stroke-width="2.6"'
    return f'stroke="{COLORS[i % len(COLORS)]}"{style}'


# a faint line: thin, pale and solid, under the others (e.g. the seeds under their mean)
FAINT = 'stroke-width="1" stroke-opacity="0.45"'


@dataclass(frozen=True)
class _Entry:
    """A legend entry: the series' label, its line's style, and its spread's colour, if any."""

    label: str
    stroke: str
    fill: str | None = None

    def sample(self, x0: float, x1: float, y: float) -> str:
        swatch = (
            f'<rect class="chart-spread-sample" x="{x0:.1f}" y="{y - 5:.1f}" '
            f'width="{x1 - x0:.1f}" height="10" fill="{self.fill}" fill-opacity="0.15"/>'
            if self.fill
            else ""
        )
        return swatch + (
            f'<line class="chart-line" x1="{x0:.1f}" x2="{x1:.1f}" y1="{y}" y2="{y}" '
            f"{self.stroke}/>"
        )


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

    def spread(self, i: int, spread: Spread) -> list[str]:
        """The spread as one polygon: along its highs, back along its lows. Clipped to the y
        axis: an interval over few seeds can reach past 0..1, where no mean@k lies."""
        if not spread.points:
            return []

        def py(y: float) -> float:
            return self.py(min(max(y, self.ys[0]), self.ys[-1]))

        xs = [self.px(x) for x, _, _ in spread.points]
        if len(xs) == 1:  # one point: a narrow bar, so it still shows
            xs = [xs[0] - 3, xs[0] + 3]
            spread = Spread(spread.series, spread.points * 2, spread.css, spread.title)
        edge = [(x, py(high)) for x, (_, _, high) in zip(xs, spread.points)]
        edge += [(x, py(low)) for x, (_, low, _) in reversed(list(zip(xs, spread.points)))]
        coords = " ".join(f"{x:.1f},{y:.1f}" for x, y in edge)
        tip = f"<title>{escape(spread.title)}</title>" if spread.title else ""
        return [
            f'<polygon class="{escape(spread.css)}" points="{coords}" '
            f'fill="{COLORS[i % len(COLORS)]}" fill-opacity="0.15">{tip}</polygon>'
        ]

    def line(
        self,
        i: int,
        label: str,
        points: Sequence[Point],
        links: Sequence[Link] | None = None,
        stroke: str = "",
        faint: bool = False,
    ) -> list[str]:
        """The series as a polyline with its intervals as error bars and a dot per point; a
        `faint` one thin and pale, its error bars left out (they would cover the spread)."""
        coords = " ".join(f"{self.px(p[0]):.1f},{self.py(p[1]):.1f}" for p in points)
        color = COLORS[i % len(COLORS)]
        if faint:
            stroke = f'stroke="{color}" {FAINT}'
        css = "chart-line faint" if faint else "chart-line"
        parts = [f'<polyline class="{css}" points="{coords}" {stroke or _stroke(i)}/>']
        bars = [] if faint else [p for p in points if len(p) == 4 and p[2] is not None]
        for x, _, low, high in bars:
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
                r = (3 if href else 1.8) if faint else (4 if href else 2.5)
                pale = ' fill-opacity="0.5"' if faint else ""
                dot = (
                    f'<circle cx="{self.px(x):.1f}" cy="{self.py(y):.1f}" r="{r}" '
                    f'fill="{color}"{pale}><title>{escape(title)}</title></circle>'
                )
                # a point that measured something opens it; the bigger dot is the target
                parts.append(
                    f'<a class="chart-point" href="{escape(href)}">{dot}</a>' if href else dot
                )
        return parts


def _empty(parts: list[str]) -> Markup:
    """The chart begun in `parts`, finished as an empty frame that says so."""
    middle = (LEFT + WIDTH - RIGHT) / 2, (TOP + HEIGHT - BOTTOM) / 2
    return Markup(
        "".join([*parts, _frame(), _text(*middle, "no points yet", "chart-empty"), "</svg>"])
    )


def _frame() -> str:
    return (
        f'<rect class="chart-frame" x="{LEFT}" y="{TOP}" width="{WIDTH - LEFT - RIGHT}" '
        f'height="{HEIGHT - TOP - BOTTOM}"/>'
    )


def _column_chars(columns: int) -> int:
    """How many characters of a label fit in a legend column."""
    return int((WIDTH - LEFT) / columns / CHAR_W) - 5


def _legend_columns(entries: list[_Entry]) -> int:
    """LEGEND_COLUMNS, or one when a label would be cut there (a seed group's says what its
    band is: cut short, it would not)."""
    fit = all(len(e.label) <= _column_chars(LEGEND_COLUMNS) for e in entries)
    return LEGEND_COLUMNS if fit else 1


def _legend_rows(entries: list[_Entry]) -> list[str]:
    """Label and line sample per series in rows under the plot, in _legend_columns columns."""
    columns = _legend_columns(entries)
    parts, column_w, chars = [], (WIDTH - LEFT) / columns, _column_chars(columns)
    for i, entry in enumerate(entries):
        row, column = divmod(i, columns)
        x, y = LEFT + column * column_w, HEIGHT + row * LEGEND_ROW + 4
        parts.append(entry.sample(x, x + 22, y - 4))
        label = entry.label
        text = label if len(label) <= chars else label[: chars - 1] + "\u2026"
        parts.append(_text(x + 28, y, text, "chart-legend", anchor="start"))
    return parts


def _legend(entries: list[_Entry]) -> list[str]:
    """Label and line sample per series, right-aligned above the plot (text width estimated)."""
    parts, right = [], WIDTH - RIGHT
    for entry in reversed(entries):
        parts.append(_text(right, 15, entry.label, "chart-legend", anchor="end"))
        right -= CHAR_W * len(entry.label) + 6
        parts.append(entry.sample(right - 18, right, 11))
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
    spreads: Sequence[Spread] = (),
    faint: Mapping[str, str] | None = None,
) -> Markup:
    """An SVG chart of `series` (label -> points in x order); `links` gives a series' points
    a link and more tooltip text each; `bands` are x ranges shaded behind the lines; `spreads`
    are y ranges shaded around a line. `faint` maps a series to the series whose colour it
    takes: it is drawn thin and pale under the rest, and left out of the legend (the seeds of
    a group under their mean).

    The extents pin what the axes cover at least, e.g. 0..1 for rates, so curves from different
    pages compare; `integer_x` keeps x ticks on whole numbers (steps, rollout counts).
    """
    faint = {name: of for name, of in (faint or {}).items() if name in series and of in series}
    own = [name for name in series if name not in faint]
    color = {name: i for i, name in enumerate(own)}  # the faint ones share another's colour
    color.update({name: color[of] for name, of in faint.items()})
    spread_of = {s.series: s for s in spreads if s.series in color}
    entries = [
        _Entry(
            name,
            _stroke(color[name], solid=name in spread_of),
            COLORS[color[name] % len(COLORS)] if name in spread_of else None,
        )
        for name in own
    ]
    legend = len(own) > 1 or bool(spread_of)  # a spread is explained there, even alone
    # The legend goes beside the title when it fits there, else in rows under the plot.
    legend_w = sum(CHAR_W * len(e.label) + 38 for e in entries)
    fits = not legend or LEFT + CHAR_W * len(title) + 16 + legend_w <= WIDTH - RIGHT
    rows = 0 if fits else -(-len(entries) // _legend_columns(entries))
    height = HEIGHT + rows * LEGEND_ROW + (8 if rows else 0)
    parts = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {height}" role="img" '
        f'aria-label="{escape(title)}" xmlns="http://www.w3.org/2000/svg">',
        f"<title>{escape(title)}</title>",
        _text(LEFT, 15, title, "chart-title", anchor="start"),
    ]
    points = [p for pts in series.values() for p in pts]
    if not points:
        return _empty(parts)
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
    for name, spread in spread_of.items():  # under every line, their dots on top
        parts += plot.spread(color[name], spread)
    strokes = {e.label: e.stroke for e in entries}  # the faint ones draw their own
    for name in [*faint, *own]:  # the faint first, so the others lie over them
        parts += plot.line(
            color[name],
            name,
            series[name],
            (links or {}).get(name),
            strokes.get(name, ""),
            name in faint,
        )
    if rows:
        parts += _legend_rows(entries)
    elif legend:
        parts += _legend(entries)
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
        return _empty(parts)
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
