"""The lineage tree of a run's harnesses drawn on the server as inline SVG.

Columns run left to right in the order the harnesses were made: one column per (harness phase,
iteration), the phases shaded as bands. Inside a column siblings gather around their parent's
row, so a parent's children line up beside it and the tree reads as a tree.
Nodes are coloured by their harness-split success (the legend gives the scale), accepted ones
wear a gold halo and a star, invalid ones are grey with a red dashed border and their error as
tooltip, and every node links to its harness page. A node is named by what tells it from its
siblings (a knob and its value, shortened where siblings agree), its whole name in the tooltip.
The SVG keeps its pixel size - text stays readable however many nodes there are - and the page
scrolls it sideways inside a container.

The layout functions are pure (data in, positions or markup out) so tests can check them alone.
"""

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from markupsafe import Markup, escape

NODE_W, NODE_H = 196, 38
COLUMN_PITCH = NODE_W + 44  # room between columns for the edges to bend
ROW_PITCH = NODE_H + 14
HEADER = 56  # phase title, iteration labels and a lane for edges above the first row
PAD = 14
LABEL_CHARS = 22  # what fits on a node's first line in bold at its font size (DejaVu Sans)
BAND_CHAR_W = 7.2  # about the width of a character of a band title, to know when to shorten it

# Harness-split success 0 -> 1: light yellow to deep blue (ColorBrewer YlGnBu), ordered in
# lightness so it reads in grey too; dark fills get white text.
SCALE = (
    (0.0, (255, 255, 217)),
    (0.25, (199, 233, 180)),
    (0.5, (127, 205, 187)),
    (0.75, (29, 145, 192)),
    (1.0, (12, 44, 132)),
)
WHITE_TEXT_FROM = 0.62
INVALID_FILL, UNSCORED_FILL = "#eaeef2", "#ffffff"

# (index of the harness phase - or -1 / past the last one for harnesses of none -, iteration)
Column = tuple[int, int]


def score_color(success: float) -> str:
    """The fill for a success rate, interpolated on SCALE (values outside 0..1 are clamped)."""
    value = min(max(success, 0.0), 1.0)
    for (lo, low_rgb), (hi, high_rgb) in zip(SCALE, SCALE[1:]):
        if value <= hi:
            t = (value - lo) / (hi - lo)
            rgb = [round(a + (b - a) * t) for a, b in zip(low_rgb, high_rgb)]
            return "#{:02x}{:02x}{:02x}".format(*rgb)
    return "#{:02x}{:02x}{:02x}".format(*SCALE[-1][1])


def column_of(node: dict[str, Any], phase_index: dict[int, int], present: set[int]) -> Column:
    """Where a node goes: its phase and iteration. A harness of no phase comes first when it is
    a root (a seed), after every phase when one of its parents is drawn (made by hand later)."""
    if node["phase_id"] in phase_index:
        return phase_index[node["phase_id"]], node["iteration"] or 0
    has_parent = any(p in present for p in node["parents"])
    return (len(phase_index) if has_parent else -1), 0


@dataclass
class Layout:
    columns: list[Column]  # in drawing order, left to right
    cells: dict[int, tuple[int, int]]  # node id -> (column index, row)
    rows: int

    def xy(self, node_id: int) -> tuple[float, float]:
        """The node's top left corner in SVG pixels."""
        column, row = self.cells[node_id]
        return PAD + column * COLUMN_PITCH, HEADER + row * ROW_PITCH

    @property
    def width(self) -> float:
        return 2 * PAD + max(len(self.columns) - 1, 0) * COLUMN_PITCH + NODE_W

    @property
    def height(self) -> float:
        return HEADER + max(self.rows, 1) * ROW_PITCH + PAD


def place(nodes: list[dict[str, Any]], phases: list[dict[str, Any]]) -> Layout:
    """Columns in (phase, iteration) order; in each, nodes ordered by their parent's row (roots
    first, then by id), siblings centred on their parent's row, never above a node placed before
    them."""
    phase_index = {p["id"]: p["index"] for p in phases}
    present = {n["id"] for n in nodes}
    by_column: dict[Column, list[dict[str, Any]]] = {}
    for node in nodes:
        by_column.setdefault(column_of(node, phase_index, present), []).append(node)
    columns = sorted(by_column)
    cells: dict[int, tuple[int, int]] = {}
    for c, column in enumerate(columns):

        def wanted(node: dict[str, Any]) -> int:
            rows = [cells[p][1] for p in node["parents"] if p in cells]
            return rows[0] if rows else -1  # the first parent is the one it was edited from

        members = sorted(by_column[column], key=lambda n: (wanted(n), n["id"]))
        siblings: dict[int, int] = {}
        for node in members:
            siblings[wanted(node)] = siblings.get(wanted(node), 0) + 1
        last = -1
        for node in members:  # siblings centred on their parent's row where there is room
            row = max(wanted(node) - (siblings[wanted(node)] - 1) // 2, last + 1, 0)
            last = row
            cells[node["id"]] = (c, row)
    rows = 1 + max((row for _, row in cells.values()), default=-1)
    return Layout(columns, cells, rows)


def _attrs(**values: Any) -> str:
    return "".join(f' {k.replace("_", "-")}="{escape(v)}"' for k, v in values.items())


def _text(x: float, y: float, body: str, css: str, **attrs: Any) -> str:
    return f'<text x="{x:.1f}" y="{y:.1f}" class="{css}"{_attrs(**attrs)}>{escape(body)}</text>'


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(limit - 1, 1)] + "\u2026"


def fit(label: str, limit: int) -> str:
    """A node's label in `limit` characters, cut where siblings do not differ: a knob's value
    stays whole and its name is shortened ("PROMP…=answer_only": siblings share the knob);
    any other name keeps its start and its end ("prompt_s…swer_only"). The whole name is in
    the node's tooltip."""
    if len(label) <= limit:
        return label
    knob, sep, value = label.partition("=")
    if sep and len(value) + 2 <= limit:  # room for the value, "…" and "="
        return knob[: limit - len(value) - 2] + "\u2026=" + value
    head = (limit - 1) // 2
    return label[:head] + "\u2026" + label[len(label) - (limit - 1 - head) :]


def tooltip(node: dict[str, Any]) -> str:
    """Everything the node stands for, one fact a line: shown on hover."""
    lines = [f"#{node['id']} {node['name']}"]
    where = []
    if node["phase_round"] is not None:
        where.append(f"harness phase {node['phase_round']}, iteration {node['iteration']}")
    where.append(f"proposer {node['proposer']}")
    if node["axis"]:
        where.append(f"axis {node['axis']}")
    lines.append(" · ".join(where))
    if not node["valid"]:
        lines.append(f"invalid: {node['error'] or 'no reason recorded'}")
    elif node["success"] is None:
        lines.append("not scored on the harness split")
    else:
        turns = f" ({node['mean_turns']:.2f} turns)" if node["mean_turns"] is not None else ""
        lines.append(f"success {node['success']:.3f}{turns}")
    lines += [
        f"re-scored in harness phase {r['phase_round']}: {r['success']:.3f}"
        for r in node["rescored"]
        if r["success"] is not None
    ]
    if node["accepted_in"]:
        lines.append("accepted in harness phase " + ", ".join(map(str, node["accepted_in"])))
    if node["hypothesis"]:
        lines.append(f"hypothesis: {_clip(node['hypothesis'], 300)}")
    return "\n".join(lines)


def _node(node: dict[str, Any], x: float, y: float) -> str:
    accepted, valid, success = node["accepted"], node["valid"], node["success"]
    css = ["lineage-node"]
    if accepted:
        css.append("accepted")
    if not valid:
        css.append("invalid")
        fill, ink, second = INVALID_FILL, "#57606a", "invalid: " + (node["error"] or "")
    elif success is None:
        css.append("unscored")
        fill, ink, second = UNSCORED_FILL, "#57606a", "not scored"
    else:
        fill = score_color(success)
        ink = "#ffffff" if success >= WHITE_TEXT_FROM else "#1f2328"
        second = f"{success:.3f}"
    first = f"{'★ ' if accepted else ''}#{node['id']} "
    first += fit(node["label"], max(LABEL_CHARS - len(first), 4))
    parts = [
        f'<a href="/harnesses/{node["id"]}" id="node-{node["id"]}" class="{" ".join(css)}">',
        f"<title>{escape(tooltip(node))}</title>",
    ]
    if accepted:
        parts.append(
            f'<rect class="halo" x="{x - 4}" y="{y - 4}" width="{NODE_W + 8}" '
            f'height="{NODE_H + 8}" rx="8"/>'
        )
    parts.append(
        f'<rect class="box" x="{x}" y="{y}" width="{NODE_W}" height="{NODE_H}" rx="5" '
        f'fill="{fill}"/>'
    )
    parts.append(_text(x + 8, y + 15, first, "node-label", fill=ink))
    parts.append(_text(x + 8, y + 30, _clip(second, LABEL_CHARS + 2), "node-detail", fill=ink))
    return "".join(parts) + "</a>"


GAP_Y = (ROW_PITCH - NODE_H) / 2  # half the room between two rows
BEND = (COLUMN_PITCH - NODE_W) / 2  # half the room between two columns


def edge_path(layout: Layout, source: int, target: int) -> str:
    """An SVG path from the parent's right side to the child's left side that never crosses a
    node: vertical moves happen between columns, horizontal runs past other columns happen in
    the gap between two rows (edges from one parent to far columns share that gap, like a bus)."""
    (x1, y1), (x2, y2) = layout.xy(source), layout.xy(target)
    sx, sy, ex, ey = x1 + NODE_W, y1 + NODE_H / 2, x2, y2 + NODE_H / 2
    if 0 < ex - sx <= COLUMN_PITCH - NODE_W:  # the next column: one S-curve through the gap
        mid = (sx + ex) / 2
        return f"M{sx:.1f},{sy:.1f} C{mid:.1f},{sy:.1f} {mid:.1f},{ey:.1f} {ex:.1f},{ey:.1f}"
    # farther (or, in odd data, backwards): drop into the row gap below (or above) the parent,
    # run along it, rise to the child
    lane = y1 + NODE_H + GAP_Y if ey >= sy else y1 - GAP_Y
    return (
        f"M{sx:.1f},{sy:.1f} C{sx + BEND:.1f},{sy:.1f} {sx + BEND:.1f},{lane:.1f} "
        f"{sx + 2 * BEND:.1f},{lane:.1f} L{ex - 2 * BEND:.1f},{lane:.1f} "
        f"C{ex - BEND:.1f},{lane:.1f} {ex - BEND:.1f},{ey:.1f} {ex:.1f},{ey:.1f}"
    )


def _edge(layout: Layout, edge: dict[str, Any], invalid: set[int]) -> str:
    path = edge_path(layout, edge["source"], edge["target"])
    css = ["lineage-edge"]
    if not edge["primary"]:
        css.append("secondary")
    if edge["target"] in invalid:
        css.append("to-invalid")
    return (
        f'<path class="{" ".join(css)}" d="{path}"><title>#{edge["source"]} → '
        f"#{edge['target']}{'' if edge['primary'] else ' (also a parent)'}</title></path>"
    )


def _band_title(phase: dict[str, Any] | None, width: float) -> tuple[str, str]:
    """A band's title fitting `width`, and the full one for its tooltip."""
    if phase is None:
        return "no harness phase", "harnesses of no harness phase of this run"
    checkpoint = phase["checkpoint"]
    title = full = f"harness phase {phase['round']}"
    if checkpoint:  # served names are paths: their last part tells them apart
        tail = checkpoint["name"].rstrip("/").split("/")[-1]
        title += f" · checkpoint {checkpoint['id']} {tail}"
        full += f" under checkpoint {checkpoint['id']} {checkpoint['name']}"
    if phase["ended_reason"]:
        full += f" · ended: {phase['ended_reason']}"
    room = int((width - 16) / BAND_CHAR_W)
    if len(title) > room:  # a narrow band: the short form
        title = f"phase {phase['round']}" + (f" · ckpt {checkpoint['id']}" if checkpoint else "")
    return _clip(title, room), full


def _bands(layout: Layout, phases: list[dict[str, Any]]) -> list[str]:
    """A shaded band per phase with its title, and the iteration over each column."""
    parts = []
    spans: dict[int, list[int]] = {}
    for c, (index, _) in enumerate(layout.columns):
        spans.setdefault(index, []).append(c)
    by_index = {p["index"]: p for p in phases}
    for n, (index, cols) in enumerate(sorted(spans.items())):
        x = PAD + cols[0] * COLUMN_PITCH - 8
        width = (cols[-1] - cols[0]) * COLUMN_PITCH + NODE_W + 16
        phase = by_index.get(index)
        title, full = _band_title(phase, width)
        parts.append(
            f'<g class="lineage-band{" odd" if n % 2 else ""}">'
            f"<title>{escape(full)}</title>"
            f'<rect x="{x}" y="4" width="{width}" height="{layout.height - 8}" rx="6"/>'
            f"{_text(x + 8, 20, title, 'band-title')}</g>"
        )
        if phase is None:
            continue  # the band title says it all
        for c in cols:
            iteration = layout.columns[c][1]
            step = "incoming" if iteration == 0 else f"iteration {iteration}"
            parts.append(
                _text(
                    PAD + c * COLUMN_PITCH + NODE_W / 2,
                    40,
                    f"phase {phase['round']} · {step}",
                    "band-iteration",
                    text_anchor="middle",
                )
            )
    return parts


def lineage_svg(data: dict[str, Any]) -> Markup:
    """The tree of /api/runs/{id}/lineage as an SVG element, or a note when it is empty."""
    nodes = data["nodes"]
    if not nodes:
        return Markup('<p class="muted">This run has no harnesses yet.</p>')
    layout = place(nodes, data["phases"])
    invalid = {n["id"] for n in nodes if not n["valid"]}
    parts = [
        f'<svg class="lineage" width="{layout.width:.0f}" height="{layout.height:.0f}" '
        f'viewBox="0 0 {layout.width:.0f} {layout.height:.0f}" role="img" '
        f'aria-label="harness lineage of run {data["run"]["id"]}: {len(nodes)} harnesses" '
        f'xmlns="http://www.w3.org/2000/svg">'
    ]
    parts += _bands(layout, data["phases"])
    parts += [_edge(layout, e, invalid) for e in data["edges"]]
    parts += [_node(n, *layout.xy(n["id"])) for n in nodes]
    return Markup("".join(parts) + "</svg>")


LEGEND_CHAR_W = 7  # a generous width per character of legend text, to place the next item


def _swatch(x: float, css: str, fill: str, label: str, halo: bool = False) -> tuple[str, float]:
    """A node sample and its label at x; returns the markup and where the next item starts."""
    out = f'<g class="lineage-node {css}">'
    if halo:
        out += f'<rect class="halo" x="{x - 3}" y="7" width="28" height="22" rx="6"/>'
    out += f'<rect class="box" x="{x}" y="10" width="22" height="16" rx="4" fill="{fill}"/></g>'
    return out + _text(x + 30, 22, label, "legend-label"), x + 30 + LEGEND_CHAR_W * len(label) + 24


def _edge_sample(x: float, css: str, label: str) -> tuple[str, float]:
    sample = f'<path class="{css}" d="M{x},18 L{x + 32},18"/>'
    after = x + 38 + LEGEND_CHAR_W * len(label) + 24
    return sample + _text(x + 38, 22, label, "legend-label"), after


def legend_svg(ticks: Iterable[float] = (0, 0.25, 0.5, 0.75, 1)) -> Markup:
    """The colour scale with its ticks and a sample of each kind of node and edge."""
    stops = "".join(f'<stop offset="{v:g}" stop-color="{score_color(v)}"/>' for v, _ in SCALE)
    parts = [
        f'<defs><linearGradient id="lineage-scale">{stops}</linearGradient></defs>',
        _text(0, 22, "harness-split success", "legend-label"),
        '<rect x="150" y="10" width="200" height="16" rx="3" fill="url(#lineage-scale)" '
        'stroke="#d0d7de"/>',
    ]
    for tick in ticks:
        parts.append(_text(150 + 200 * tick, 42, f"{tick:g}", "legend-tick", text_anchor="middle"))
    x = 390.0
    for item, *args in (
        (_swatch, "accepted", score_color(0.7), "★ accepted", True),
        (_swatch, "invalid", INVALID_FILL, "invalid (hover: error)"),
        (_swatch, "unscored", UNSCORED_FILL, "not scored"),
        (_edge_sample, "lineage-edge", "parent"),
        (_edge_sample, "lineage-edge secondary", "also a parent"),
    ):
        markup, x = item(x, *args)
        parts.append(markup)
    width = round(x)
    return Markup(
        f'<svg class="lineage-legend" width="{width}" height="48" '
        f'viewBox="0 0 {width} 48" role="img" aria-label="legend" '
        f'xmlns="http://www.w3.org/2000/svg">' + "".join(parts) + "</svg>"
    )
