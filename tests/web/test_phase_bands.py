"""The run page's test curve shades the run's phases behind it, on each x axis, so a reader sees
which phase moved the curve: weight and harness phases in their own tints, named by the run's
numbering ("weight phase 2")."""

import html
import re
from datetime import timedelta

from app.db.schema import Metric, Phase, Run, TrainingJob, utc


def three_phases(store) -> Run:
    """W1 (32 rollouts, 2 RFT steps, 0-60 s), H1 (40 rollouts, 60-150 s), W2 (16 rollouts, one
    step done and one failed, 150-200 s), with test points after each."""
    run = store.write(
        Run(name="banded", kind="experiment", domain="arith", status="done", strategy="whale")
    )
    t0 = utc(run.created_at)
    at = [t0 + timedelta(seconds=s) for s in (0, 60, 150, 200)]
    w1, h1, w2 = store.write(
        *[
            Phase(
                run_id=run.id,
                kind=kind,
                round=rnd,
                status="done",
                ended_reason=why,
                rollouts=n,
                created_at=at[i],
                finished_at=at[i + 1],
            )
            for i, (kind, rnd, n, why) in enumerate(
                [
                    ("weight", 1, 32, "fixed"),
                    ("harness", 1, 40, "patience"),
                    ("weight", 2, 16, "budget"),
                ]
            )
        ]
    )
    harness, checkpoint = store.harness(run), store.checkpoint()
    store.write(
        *[
            TrainingJob(
                run_id=run.id,
                harness_id=harness.id,
                checkpoint_in_id=checkpoint.id,
                step=step,
                status=status,
                phase_id=phase.id,
            )
            for step, (phase, status) in enumerate(
                [(w1, "done"), (w1, "done"), (w2, "done"), (w2, "failed")]
            )
        ],
        *[
            Metric(
                run_id=run.id,
                series="test/mean@k",
                x=steps,
                rollouts=rollouts,
                y=y,
                weight_steps=steps,
                wall_s=wall,
            )
            for rollouts, steps, wall, y in [
                (0, 0, 0, 0.1),
                (32, 2, 61, 0.3),
                (72, 2, 151, 0.6),
                (88, 3, 201, 0.65),
            ]
        ],
    )
    return run


def bands(page: str) -> list[tuple[str, float, float, str]]:
    """(kind, x0, x1, name) of each phase band drawn, in drawing order."""
    found = re.findall(
        r'<rect class="phase-band phase-band-(\w+)"[^>]*data-x0="([^"]+)" data-x1="([^"]+)" '
        r'aria-label="([^"]+)"><title>([^<]*)</title>',
        page,
    )
    return [(kind, float(x0), float(x1), name) for kind, x0, x1, name, _ in found]


def test_phases_shade_the_test_curve_on_rollouts_used(store, client):
    run = three_phases(store)
    page = client.get(f"/runs/{run.id}").text
    assert bands(page) == [
        ("weight", 0, 32, "weight phase 1"),
        ("harness", 32, 72, "harness phase 1"),
        ("weight", 72, 88, "weight phase 2"),
    ]
    # behind the curve: every band comes before the line and its dots
    assert page.rindex('class="phase-band ') < page.index('class="chart-line" points=')
    tips = [html.unescape(t) for t in re.findall(r'class="phase-band [^>]*><title>([^<]*)<', page)]
    assert tips[1] == "harness phase 1 (search): 40 rollouts, patience"
    labels = re.findall(r'class="phase-band-label phase-band-\w+"[^>]*>([^<]*)<', page)
    assert labels == ["weight phase 1", "harness phase 1", "W2"]  # the narrow one: short

    spans = client.get(f"/api/runs/{run.id}").json()["dashboard"]["curves"]["phases"]
    assert [(s["label"], s["x0"], s["x1"]) for s in spans] == [
        ("weight phase 1", 0, 32),
        ("harness phase 1", 32, 72),
        ("weight phase 2", 72, 88),
    ]


def test_on_rft_steps_only_weight_phases_have_a_band(store, client):
    run = three_phases(store)
    page = client.get(f"/runs/{run.id}?x=weight_steps").text
    # a harness phase trains nothing; W2's failed step is no step
    assert bands(page) == [("weight", 0, 2, "weight phase 1"), ("weight", 2, 3, "weight phase 2")]


def test_on_wall_time_a_band_runs_from_the_phase_start_to_its_end(store, client):
    run = three_phases(store)
    page = client.get(f"/runs/{run.id}?x=wall_s").text
    assert "wall-clock time (min)" in page  # 200 s: the axis is in minutes, the bands too
    assert [(k, round(a * 60), round(b * 60), n) for k, a, b, n in bands(page)] == [
        ("weight", 0, 60, "weight phase 1"),
        ("harness", 60, 150, "harness phase 1"),
        ("weight", 150, 200, "weight phase 2"),
    ]


def test_a_baseline_overlaid_brings_no_bands_of_its_own(store, client):
    run, baseline = three_phases(store), three_phases(store)
    page = client.get(f"/runs/{run.id}?baseline={baseline.id}").text
    assert len(bands(page)) == 3 and page.count('class="chart-line" points=') >= 2
