"""The training job, checkpoint and run pages of a weight phase: what they show, their links,
their charts and live polling."""

import re

import pytest

from app.db.schema import TrainingJob
from tests.api.synthetic_training import loop_weight_phases, weight_phase

PASS2_FAIL2 = ["pass", "fail", "pass", "fail"]


def test_job_page_links_checkpoints_harness_and_the_accepted_rollouts(store, client):
    phase = weight_phase(store, [PASS2_FAIL2])
    job, sampling, [out] = phase.jobs[0], phase.sampling[0], phase.checkpoints

    page = client.get(f"/training/{job.id}").text

    assert f'href="/checkpoints/{phase.base.id}"' in page
    assert f'href="/checkpoints/{out.id}"' in page
    assert f'href="/harnesses/{job.harness_id}"' in page
    assert f'id="accepted-link" href="/rollouts?evaluation={sampling.id}&amp;status=pass"' in page
    passed = re.findall(r'href="/rollouts/(\d+)"', page)
    assert len(passed) == 2  # the two accepted rollouts, linked to their traces
    assert "50%" in page  # accept rate
    assert "hx-trigger" not in page  # a finished job does not poll


def test_job_page_draws_the_loss_curve(store, client):
    job = weight_phase(store, [PASS2_FAIL2]).jobs[0]

    page = client.get(f"/training/{job.id}").text

    chart = re.search(r'<div class="charts" id="loss-chart">(.*?)</div>', page, re.S).group(1)
    assert chart.startswith("<svg") and "<polyline" in chart
    assert "training loss per batch" in chart and "step" in chart
    assert chart.count("<circle") == 4  # a dot per batch


def test_skipped_job_says_nothing_was_trained(store, client):
    job = weight_phase(store, [["fail", "fail"]]).jobs[0]

    page = client.get(f"/training/{job.id}").text

    assert "nothing was accepted" in page
    assert 'id="loss-chart"' not in page
    assert "<svg" not in page


def test_failed_job_shows_its_error_and_log_tail(store, client):
    job = weight_phase(store, [PASS2_FAIL2], last="failed").jobs[0]

    page = client.get(f"/training/{job.id}").text

    assert "box-error" in page and "OutOfMemoryError" in page
    assert "loading /models/smol" in page  # the log tail


def test_job_page_polls_while_training_until_it_ends(store, client):
    job = weight_phase(store, [PASS2_FAIL2], last="training").jobs[0]

    page = client.get(f"/training/{job.id}").text
    fragment = client.get(f"/training/{job.id}/live").text

    assert f'hx-get="/training/{job.id}/live"' in page
    assert 'hx-trigger="every 2s"' in fragment and "<html" not in fragment
    assert "<polyline" in fragment  # the loss so far

    store.writer.submit(lambda s: setattr(s.get(TrainingJob, job.id), "status", "done")).result()
    assert "hx-trigger" not in client.get(f"/training/{job.id}/live").text


def test_checkpoint_page_shows_lineage_job_children_and_evaluations(store, client):
    phase = weight_phase(store, [PASS2_FAIL2, PASS2_FAIL2])
    first, second = phase.checkpoints

    page = client.get(f"/checkpoints/{first.id}").text

    lineage = re.search(r"<dt>lineage</dt><dd>(.*?)</dd>", page, re.S).group(1)
    assert lineage.index(f'href="/checkpoints/{phase.base.id}"') < lineage.index(
        f'href="/checkpoints/{first.id}"'
    )
    children = re.search(r"<dt>children</dt><dd>(.*?)</dd>", page, re.S).group(1)
    assert f'href="/checkpoints/{second.id}"' in children
    assert f'href="/training/{phase.jobs[0].id}"' in page  # made by
    assert f'href="/rollouts?evaluation={phase.sampling[1].id}"' in page  # evaluated under it
    assert "3.3 MiB" in page


def test_run_page_has_a_weight_phase_with_jobs_chain_and_charts(store, client):
    phase = weight_phase(store, [PASS2_FAIL2, ["fail"]])

    page = client.get(f"/runs/{phase.run.id}").text

    assert "Weight phase" in page
    for job in phase.jobs:
        assert f'href="/training/{job.id}"' in page
    assert f'href="/checkpoints/{phase.checkpoints[0].id}"' in page
    assert page.count("<svg") == 2
    assert "rollouts used (training + harness search)" in page and "accept rate" in page


def test_run_page_gives_each_weight_phase_its_section_in_the_run_order(store, client):
    first, second = loop_weight_phases(store, [[PASS2_FAIL2, ["pass"] * 4], [["fail"] * 4]])

    page = client.get(f"/runs/{first.run.id}").text

    one = section(page, f"weight-phase-{first.row.id}")
    two = section(page, f"weight-phase-{second.row.id}")
    assert "Weight phase 1" in one and "Weight phase 2" in two
    assert "2 RFT steps, 8 training rollouts" in one and "accept rate 75%" in one
    assert "1 RFT step, 4 training rollouts" in two and "accept rate 0%" in two
    for job in first.jobs:
        assert f'href="/training/{job.id}"' in one and f'href="/training/{job.id}"' not in two
    for made in first.checkpoints:  # the checkpoints the phase made
        assert f'href="/checkpoints/{made.id}"' in one
    assert "none made" in two
    # in the run's order: weight phase 1, harness phase 1, weight phase 2, harness phase 2
    order = re.findall(r'<section class="(weight|harness)-phase" id="[a-z]+-phase-\d+"', page)
    assert order == ["weight", "harness", "weight", "harness"]
    # the timeline's blocks lead to the sections
    assert f'href="#weight-phase-{second.row.id}"' in page


def test_job_page_names_its_weight_phase_and_links_it(store, client):
    first, second = loop_weight_phases(store, [[PASS2_FAIL2], [PASS2_FAIL2]])
    job = second.jobs[0]

    page = client.get(f"/training/{job.id}").text

    link = f'href="/runs/{first.run.id}#weight-phase-{second.row.id}"'
    assert f'<a id="job-phase" {link}>weight phase 2</a>' in page
    # the phase's first step, the run's second: named by both, from 1, never "step 2 of phase 2"
    assert re.search(
        r"<h1>Training job \d+ · RFT step 1 of weight phase 2, step 2 of the run</h1>", page
    )
    lone = weight_phase(store, [PASS2_FAIL2]).jobs[0]  # `whale train`: no phase to name
    assert 'id="job-phase"' not in client.get(f"/training/{lone.id}").text


def section(page: str, id_: str) -> str:
    start = page.index(f'id="{id_}"')
    return page[start : page.index("</section>", start)]


def test_run_without_training_looks_as_before(store, client):
    run = store.run()
    page = client.get(f"/runs/{run.id}").text
    assert "Weight phase" not in page and "<svg" not in page


@pytest.mark.parametrize("url", ["/training/999", "/training/999/live", "/checkpoints/999"])
def test_unknown_ids_get_a_readable_404_page(client, url):
    page = client.get(url)
    assert page.status_code == 404
    assert page.headers["content-type"].startswith("text/html")
    assert "999 not found" in page.text


def test_checkpoint_score_cards_name_the_harness_they_were_measured_with(store, client):
    phase = weight_phase(store, [PASS2_FAIL2])
    [out] = phase.checkpoints
    harness = phase.jobs[0].harness_id

    page = client.get(f"/checkpoints/{out.id}").text

    cards = re.search(r'<div class="summary">(.*?)</div>\s*\n\s*<h2>', page, re.S).group(1)
    card = re.search(r"<div><span class=\"label\">test mean@2</span>(.*?)</div>", cards, re.S)
    assert card, cards
    assert "0.500" in card.group(1)
    assert re.search(rf'under <a href="/harnesses/{harness}">seed.py</a>', card.group(1))
    data = client.get(f"/api/checkpoints/{out.id}").json()["mean_at_k_by_split"]["test"]
    assert (data["harness_id"], data["harness_name"]) == (harness, "seed.py")


def test_one_step_numbering_on_every_page_and_in_their_json(store, client):
    """A step is "step N of weight phase R, step M of the run", counted from 1, the same on
    the job page, the checkpoint it made, the run's table and activity, and in their JSON
    (`step` keeps the store's count from 0); the run's step chart puts step M at x = M."""
    first, second = loop_weight_phases(store, [[PASS2_FAIL2, PASS2_FAIL2], [PASS2_FAIL2]])
    job, made = second.jobs[0], second.checkpoints[0]
    name = "step 1 of weight phase 2, step 3 of the run"

    data = client.get(f"/api/training/{job.id}").json()["job"]
    assert (data["step"], data["step_in_phase"], data["step_in_run"]) == (2, 1, 3)
    assert data["step_name"] == name and data["phase_round"] == 2
    assert f"RFT {name}</h1>" in client.get(f"/training/{job.id}").text

    made_by = client.get(f"/api/checkpoints/{made.id}").json()["training_job"]
    assert (made_by["step_in_phase"], made_by["step_in_run"], made_by["step_name"]) == (
        1,
        3,
        name,
    )
    assert f"RFT {name}, in" in client.get(f"/checkpoints/{made.id}").text

    run = client.get(f"/api/runs/{first.run.id}").json()
    numbers = [
        (j["step_in_phase"], j["step_in_run"]) for wp in run["weight_phases"] for j in wp["jobs"]
    ]
    assert numbers == [(1, 1), (2, 2), (1, 3)]
    page = client.get(f"/runs/{first.run.id}").text
    assert f'title="RFT {name}">1 <span class="muted small">(3 of the run)</span>' in page
    accept = run["dashboard"]["curves"]["training"]["train/accept_rate"]
    assert [p["x"] for p in accept] == [1, 2, 3]


def test_a_training_job_says_when_it_started_in_its_json_as_on_its_page(store, client):
    job = weight_phase(store, [PASS2_FAIL2]).jobs[0]
    data = client.get(f"/api/training/{job.id}").json()["job"]
    assert data["started_at"] is not None and data["started_at"] == data["created_at"]


def test_rft_sampling_is_listed_apart_from_tests_under_the_step_it_sampled_for(store, client):
    first, _ = loop_weight_phases(store, [[PASS2_FAIL2], [PASS2_FAIL2]])
    data = client.get(f"/api/runs/{first.run.id}").json()
    named = {e["id"]: e["sampling_for"] for e in data["evaluations"] if e["split"] == "train"}
    assert sorted(named.values()) == [
        "step 1 of weight phase 1, step 1 of the run",
        "step 1 of weight phase 2, step 2 of the run",
    ]
    page = client.get(f"/runs/{first.run.id}").text
    tests, sampling = page.split('<h2 id="rft-sampling">')
    tests = tests[tests.rindex("<h2>Evaluations") :]
    assert "<td>train</td>" not in tests and "sampling for RFT" not in tests
    assert sampling.count("sampling for RFT step 1 of weight phase") == 2


def test_the_activity_line_says_sampling_for_the_step_and_counts_in_words(store, client):
    sampling = weight_phase(store, [PASS2_FAIL2], last="sampling")
    activity = client.get(f"/api/runs/{sampling.run.id}").json()["dashboard"]["activity"]
    assert activity == "sampling for RFT step 1 of the run: 0 / 4 rollouts"
    training = weight_phase(store, [["pass", "fail", "fail", "fail"]], last="training")
    store.write_values(training.jobs[-1], n_accepted=1)
    activity = client.get(f"/api/runs/{training.run.id}").json()["dashboard"]["activity"]
    assert activity == "training (RFT step 1 of the run) on 1 accepted rollout"
