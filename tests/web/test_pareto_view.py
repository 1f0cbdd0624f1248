"""Each harness phase on the run page draws its candidates as success against mean turns: every
scored harness a point linking to its page, the Pareto front the phase selects on marked and
joined, the harness it chose ringed; the JSON gives the same points."""

import html
import re

from app.db.schema import Evaluation, Phase, SearchIteration

# name: (iteration, success, mean turns); None: invalid, never scored
CANDIDATES = {
    "short": (1, 0.25, 1.2),  # on the front: few turns
    "program": (1, 0.40, 2.0),  # on the front
    "slow": (1, 0.30, 2.5),  # dominated by program: less success, more turns
    "syntax": (1, None, None),  # invalid
    "examples": (2, 0.60, 3.0),  # on the front, the best: chosen
}


def scored_phase(store, done: bool = True):
    run = store.run(name="search seed.py")
    seed, checkpoint = store.harness(run, name="seed.py"), store.checkpoint()
    phase = store.write(
        Phase(
            run_id=run.id,
            kind="harness",
            round=1,
            harness_in_id=seed.id,
            checkpoint_in_id=checkpoint.id,
        )
    )
    harnesses = {"seed.py": seed}
    scores = {"seed.py": (0.10, 1.0)}
    for name, (iteration, success, turns) in CANDIDATES.items():
        harnesses[name] = store.harness(
            run,
            name=name,
            parent_id=seed.id,
            phase_id=phase.id,
            iteration=iteration,
            valid=success is not None,
        )
        if success is not None:
            scores[name] = (success, turns)
    for name, (success, turns) in scores.items():
        store.write(
            Evaluation(
                run_id=run.id,
                harness_id=harnesses[name].id,
                checkpoint_id=checkpoint.id,
                phase_id=phase.id,
                split="harness",
                k=1,
                n_tasks=16,
                n_done=16,
                status="done",
                mean_at_k=success,
                mean_turns=turns,
            )
        )
    best = harnesses["examples"].id
    store.write(
        SearchIteration(
            run_id=run.id, phase_id=phase.id, iteration=1, proposer="llm", accepted_harness_id=best
        )
    )
    if done:
        store.write_values(phase, status="done", ended_reason="fixed", harness_out_id=best)
    return run, harnesses


def drawn_points(page: str) -> dict[str, tuple[str, str, str]]:
    """harness name -> (link, mark classes, tooltip) of each point of the Pareto chart."""
    svg = page[page.index('<svg class="chart scatter"') :]
    svg = svg[: svg.index("</svg>")]
    found = re.findall(
        r'<a class="chart-point" href="([^"]+)"><title>([^<]*)</title>'
        r'(?:<circle class="scatter-ring"[^>]*/>)?<circle class="scatter-mark ([^"]+)"',
        svg,
    )
    points = {}
    for href, title, css in found:
        title = html.unescape(title)
        name = re.match(r"#\d+ (\S+):", title).group(1)
        points[name] = (href, css, title)
    return points


def test_the_pareto_view_marks_the_front_and_the_chosen_harness(store, client):
    run, h = scored_phase(store)
    page = client.get(f"/runs/{run.id}").text
    assert 'id="pareto-' in page
    points = drawn_points(page)
    assert set(points) == {"seed.py", "short", "program", "slow", "examples"}  # not the invalid
    assert {n: p[1] for n, p in points.items()} == {
        "seed.py": "front",  # fewest turns: nothing beats it there
        "short": "front",
        "program": "front",
        "slow": "dominated",
        "examples": "front chosen",
    }
    for name, (href, _, _) in points.items():
        assert href == f"/harnesses/{h[name].id}"
    assert points["program"][2] == (
        f"#{h['program'].id} program: success 0.400, 2.00 turns\non the Pareto front"
    )
    assert points["examples"][2].endswith("on the Pareto front, chosen at the phase end")
    assert points["seed.py"][2].endswith("incoming, on the Pareto front")
    svg = page[page.index('<svg class="chart scatter"') :]
    assert svg.count('class="scatter-ring"') == 1  # one chosen harness, ringed
    # the front joined in order of turns: four points, left to right
    path = re.search(r'<polyline class="scatter-path" points="([^"]+)"', svg).group(1)
    xs = [float(p.split(",")[0]) for p in path.split()]
    assert len(xs) == 4 and xs == sorted(xs)
    assert "1 candidate without a score (invalid or not evaluated yet) not drawn" in page

    (hp,) = client.get(f"/api/runs/{run.id}").json()["harness_phases"]
    pareto = hp["pareto"]
    assert pareto["front"] == [h[n].id for n in ("seed.py", "short", "program", "examples")]
    assert pareto["chosen_id"] == h["examples"].id and pareto["final"] is True
    by_name = {p["name"]: p for p in pareto["points"]}
    assert by_name["slow"] == {
        "harness_id": h["slow"].id,
        "name": "slow",
        "iteration": 1,
        "success": 0.30,
        "mean_turns": 2.5,
        "incoming": False,
        "on_front": False,
        "chosen": False,
    }
    assert by_name["seed.py"]["incoming"] and pareto["unscored"] == 1


def test_while_the_phase_runs_its_pick_so_far_is_marked(store, client):
    run, h = scored_phase(store, done=False)
    points = drawn_points(client.get(f"/runs/{run.id}").text)
    assert points["examples"][2].endswith("accepted so far")
    pareto = client.get(f"/api/runs/{run.id}").json()["harness_phases"][0]["pareto"]
    assert pareto["chosen_id"] == h["examples"].id and pareto["final"] is False
