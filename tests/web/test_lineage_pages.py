"""The lineage page /runs/{id}/lineage: the harness tree as SVG (every node a link to its
harness, accepted ones starred, invalid ones with their error), the checkpoint chain and the
table of the same harnesses; and the layout functions that place the tree."""

import html
import re

from app.db.schema import Run
from app.web.lineage_svg import NODE_H, NODE_W, edge_path, fit, place, score_color
from tests.api.synthetic_lineage import MISSING_RUN, SYNTAX_ERROR, large_search_run, search_run


def _svg(page: str) -> str:
    return re.search(r'<svg class="lineage".*?</svg>', page, re.S).group(0)


def _node(svg: str, harness_id: int) -> str:
    """The <a> element drawing one harness in the tree."""
    return re.search(
        rf'<a href="/harnesses/{harness_id}" id="node-{harness_id}".*?</a>', svg, re.S
    ).group(0)


def test_every_harness_of_the_run_is_a_node_linking_to_its_page(store, client):
    r = search_run(store)

    svg = _svg(client.get(f"/runs/{r.run.id}/lineage").text)

    ids = [int(i) for i in re.findall(r'<a href="/harnesses/(\d+)"', svg)]
    assert sorted(ids) == sorted(h.id for h in (r.seed, r.a, r.b, r.c, r.d, r.e, r.f, r.g))
    assert f"#{r.a.id} program" in _node(svg, r.a.id)
    assert "0.400" in _node(svg, r.a.id)
    # one drawn edge per parent link: 7 first parents and d's second parent, dashed
    assert svg.count('class="lineage-edge') == 8
    assert svg.count('class="lineage-edge secondary"') == 1


def test_accepted_nodes_are_starred_and_invalid_ones_carry_their_error(store, client):
    r = search_run(store)

    svg = _svg(client.get(f"/runs/{r.run.id}/lineage").text)

    for accepted in (r.c, r.e):
        node = _node(svg, accepted.id)
        assert 'class="lineage-node accepted"' in node and f"★ #{accepted.id}" in node
        assert 'class="halo"' in node
    assert "★" not in _node(svg, r.a.id)
    for invalid, error in ((r.b, SYNTAX_ERROR), (r.g, MISSING_RUN)):
        node = _node(svg, invalid.id)
        assert 'class="lineage-node invalid"' in node
        title = re.search(r"<title>(.*?)</title>", node, re.S).group(1)
        assert "invalid: " + error.replace("'", "&#39;") in title


def test_nodes_are_coloured_by_the_score_under_their_phase_checkpoint(store, client):
    r = search_run(store)

    svg = _svg(client.get(f"/runs/{r.run.id}/lineage").text)

    assert f'fill="{score_color(0.80)}"' in _node(svg, r.e.id)
    # c is drawn with its phase-1 score; the phase-2 re-score is in its tooltip
    assert f'fill="{score_color(0.60)}"' in _node(svg, r.c.id)
    assert "re-scored in harness phase 2: 0.650" in _node(svg, r.c.id)
    assert score_color(0.0) != score_color(0.5) != score_color(1.0)


def test_page_has_legend_checkpoint_chain_and_a_table_of_the_nodes(store, client):
    r = search_run(store)

    page = client.get(f"/runs/{r.run.id}/lineage").text

    assert 'class="lineage-legend"' in page and "harness-split success" in page
    chain = re.search(r'<span class="chain">.*?</span></p>', page, re.S).group(0)
    linked = [int(i) for i in re.findall(r'href="/checkpoints/(\d+)"', chain)]
    assert linked == [r.base.id, r.c1.id, r.c2.id]
    table = re.search(r'<table class="lineage-nodes">.*?</table>', page, re.S).group(0)
    assert len(re.findall(r'<tr id="row-\d+"', table)) == 8
    row_b = re.search(rf'<tr id="row-{r.b.id}".*?</tr>', table, re.S).group(0)
    assert "status-invalid" in row_b and "SyntaxError: invalid syntax (line 3)" in row_b
    row_e = re.search(rf'<tr id="row-{r.e.id}".*?</tr>', table, re.S).group(0)
    assert "status-accepted" in row_e and "0.800" in row_e


def test_run_page_links_to_its_lineage(store, client):
    r = search_run(store)
    assert f'href="/runs/{r.run.id}/lineage"' in client.get(f"/runs/{r.run.id}").text


def test_unknown_run_has_a_readable_404(client):
    response = client.get("/runs/404/lineage")
    assert response.status_code == 404 and "Run 404 not found" in response.text


def test_children_sit_right_of_their_parents_and_no_nodes_overlap(store, client):
    r = search_run(store)
    data = client.get(f"/api/runs/{r.run.id}/lineage").json()

    layout = place(data["nodes"], data["phases"])

    x = {n["id"]: layout.xy(n["id"])[0] for n in data["nodes"]}
    for edge in data["edges"]:
        assert x[edge["target"]] > x[edge["source"]]
    assert x[r.e.id] > x[r.c.id] > x[r.a.id] > x[r.seed.id]  # phase 2 right of phase 1
    boxes = [layout.xy(n["id"]) for n in data["nodes"]]
    assert len(set(boxes)) == len(boxes)


def test_a_hundred_harnesses_stay_readable_and_edges_avoid_nodes(store, client):
    run = large_search_run(store)  # 3 phases x 8 iterations x 4 candidates + the seed
    data = client.get(f"/api/runs/{run.id}/lineage").json()
    assert len(data["nodes"]) == 97

    layout = place(data["nodes"], data["phases"])
    svg = _svg(client.get(f"/runs/{run.id}/lineage").text)

    assert layout.rows <= 12, "siblings gather around their parent instead of piling downwards"
    # drawn at full size: the page scrolls it sideways rather than shrinking the text
    assert f'width="{layout.width:.0f}"' in svg and layout.width > 3000
    boxes = [(*layout.xy(n["id"]), n["id"]) for n in data["nodes"]]
    for edge in data["edges"]:
        points = _path_points(edge_path(layout, edge["source"], edge["target"]))
        for bx, by, node_id in boxes:
            if node_id in (edge["source"], edge["target"]):
                continue
            assert not any(bx < px < bx + NODE_W and by < py < by + NODE_H for px, py in points), (
                f"edge {edge} runs through node {node_id}"
            )


def _path_points(path: str, per_segment: int = 20) -> list[tuple[float, float]]:
    """Points along an SVG path of M, L and C commands (cubic curves sampled)."""
    points, current = [], (0.0, 0.0)
    for command, args in re.findall(r"([MLC])([^MLC]*)", path):
        numbers = [float(v) for v in re.findall(r"-?[\d.]+", args)]
        pairs = list(zip(numbers[::2], numbers[1::2]))
        if command == "C":
            (x1, y1), (x2, y2), (x3, y3) = pairs
            x0, y0 = current
            for i in range(1, per_segment + 1):
                t = i / per_segment
                a, b, c, d = (1 - t) ** 3, 3 * (1 - t) ** 2 * t, 3 * (1 - t) * t**2, t**3
                points.append(
                    (a * x0 + b * x1 + c * x2 + d * x3, a * y0 + b * y1 + c * y2 + d * y3)
                )
            current = (x3, y3)
        else:
            if command == "L":  # the lanes: horizontal runs
                (x0, y0), x1 = current, pairs[0][0]
                points += [(x0 + (x1 - x0) * i / per_segment, y0) for i in range(per_segment)]
            current = pairs[0]
            points.append(current)
    return points


def test_a_harness_of_no_phase_goes_first_as_a_root_or_last_as_a_child(store, client):
    r = search_run(store)
    by_hand = store.harness(r.run, name="by-hand", parent_id=r.e.id)  # after the search
    loose = store.harness(r.run, name="loose")  # a root of its own
    data = client.get(f"/api/runs/{r.run.id}/lineage").json()

    layout = place(data["nodes"], data["phases"])

    x = {n["id"]: layout.xy(n["id"])[0] for n in data["nodes"]}
    assert x[loose.id] < x[r.seed.id] and x[by_hand.id] > x[r.e.id]
    svg = _svg(client.get(f"/runs/{r.run.id}/lineage").text)
    assert svg.count("no harness phase</text>") == 2  # one band before the phases, one after


def _label(svg: str, harness_id: int) -> str:
    """The first line of a node, as drawn."""
    node = _node(svg, harness_id)
    return html.unescape(re.search(r'class="node-label"[^>]*>(.*?)</text>', node).group(1))


def test_sibling_nodes_are_told_apart_by_what_differs(store, client):
    run = store.write(Run(name="knobs", kind="experiment", domain="arith", strategy="whale"))
    seed = store.harness(run, name="seed.py", proposer="seed")

    def child(name, proposer="knobs", axis="PROMPT_STYLE"):
        return store.harness(run, name=name, parent_id=seed.id, proposer=proposer, axis=axis)

    answer_only, step_by_step = (
        child("prompt_style-answer_only"),
        child("prompt_style-step_by_step"),
    )
    titled = child("prompt_style-answer_only_then_check_the_sum.py", proposer="llm", axis="prompt")

    svg = _svg(client.get(f"/runs/{run.id}/lineage").text)

    labels = {h.id: _label(svg, h.id) for h in (answer_only, step_by_step, titled)}
    assert labels[answer_only.id] == f"#{answer_only.id} PROMPT…=answer_only"
    assert labels[step_by_step.id].endswith("…=step_by_step")
    assert labels[titled.id].startswith(f"#{titled.id} prompt_") and labels[titled.id].endswith(
        "_the_sum"
    )
    assert len(set(labels.values())) == 3 and all(len(label) <= 22 for label in labels.values())
    for harness in (answer_only, step_by_step, titled):  # the whole name on hover
        title = re.search(r"<title>(.*?)\n", _node(svg, harness.id)).group(1)
        assert title == f"#{harness.id} {harness.name}"
    nodes = client.get(f"/api/runs/{run.id}/lineage").json()["nodes"]
    assert {n["id"]: n["label"] for n in nodes}[answer_only.id] == "PROMPT_STYLE=answer_only"


def test_fit_keeps_a_knobs_value_and_both_ends_of_other_names():
    assert fit("SOLVER=program", 20) == "SOLVER=program"
    assert fit("PROMPT_STYLE=answer_only", 18) == "PROMP…=answer_only"
    assert fit("PROMPT_STYLE=answer_only", 13) == "…=answer_only"  # siblings share the knob
    assert fit("prompt_style-answer_only", 18) == "prompt_s…swer_only"
    assert fit("X=a_value_too_long_to_keep_whole", 12) == "X=a_v…_whole"
    assert all(len(fit("n" * 40 + "=v" * k, 19)) == 19 for k in range(3))
