"""GET /api/training/{id}, /api/checkpoints/{id} and the weight phase of /api/runs/{id}."""

import pytest

from tests.api.synthetic_training import BATCHES, loop_weight_phases, weight_phase
from tests.conftest import error_detail

PASS2_FAIL2 = ["pass", "fail", "pass", "fail"]


def test_training_job_has_its_counts_checkpoints_and_loss_curve(store, client):
    phase = weight_phase(store, [PASS2_FAIL2])
    [job], [out] = phase.jobs, phase.checkpoints

    data = client.get(f"/api/training/{job.id}").json()

    assert data["job"]["status"] == "done" and data["job"]["live"] is False
    assert (data["job"]["n_rollouts"], data["job"]["n_accepted"]) == (4, 2)
    assert data["job"]["accept_rate"] == 0.5
    assert data["job"]["checkpoint_in"]["id"] == phase.base.id
    assert data["job"]["checkpoint_out"] == {
        "id": out.id,
        "name": out.name,
        "kind": "lora",
        "training_job_id": job.id,
        "weights_dropped": False,
    }
    assert data["run"]["id"] == phase.run.id and data["harness"]["name"] == "seed.py"
    assert data["mean_loss"] == job.loss
    xs = [p["x"] for p in data["loss_curve"]]
    assert len(xs) == BATCHES and xs == sorted(xs) and 0 < xs[0] and xs[-1] == 1.0


def test_accepted_rollouts_are_the_first_passes_of_the_sampling(store, client):
    phase = weight_phase(store, [["fail"] + ["pass"] * 8])
    job, sampling = phase.jobs[0], phase.sampling[0]

    data = client.get(f"/api/training/{job.id}").json()

    shown = data["accepted_rollouts"]
    assert len(shown) == 5 and {r["status"] for r in shown} == {"pass"}
    assert {r["evaluation_id"] for r in shown} == {sampling.id}
    assert data["job"]["evaluation_id"] == sampling.id
    # the list the page links to holds every accepted rollout
    listed = client.get("/api/rollouts", params={"evaluation": sampling.id, "status": "pass"})
    assert len(listed.json()["items"]) == data["job"]["n_accepted"] == 8
    assert [r["id"] for r in listed.json()["items"][:5]] == [r["id"] for r in shown]


def test_a_sampling_job_shows_its_evaluation_before_it_names_it(store, client):
    phase = weight_phase(store, [PASS2_FAIL2, PASS2_FAIL2], last="sampling")

    data = client.get(f"/api/training/{phase.jobs[-1].id}").json()

    assert data["job"]["status"] == "sampling" and data["job"]["live"] is True
    assert data["job"]["evaluation_id"] is None
    assert data["sampling_evaluation"]["id"] == phase.sampling[-1].id
    assert data["accepted_rollouts"] == [] and data["loss_curve"] == []
    assert data["job"]["checkpoint_in"]["id"] == phase.checkpoints[0].id


def test_a_failed_job_keeps_its_error_and_partial_loss(store, client):
    phase = weight_phase(store, [PASS2_FAIL2], last="failed")

    data = client.get(f"/api/training/{phase.jobs[0].id}").json()

    assert data["job"]["status"] == "failed" and data["job"]["checkpoint_out"] is None
    assert "OutOfMemoryError" in data["job"]["error"]
    assert "OutOfMemoryError" in data["job"]["log_tail"]
    losses = [p["y"] for p in data["loss_curve"]]
    assert len(losses) == BATCHES // 2
    assert data["mean_loss"] == pytest.approx(sum(losses) / len(losses))


def test_a_checkpoint_knows_its_job_lineage_children_and_evaluations(store, client):
    phase = weight_phase(store, [PASS2_FAIL2, ["fail"], PASS2_FAIL2])
    first, second = phase.checkpoints
    base = phase.base

    data = client.get(f"/api/checkpoints/{second.id}").json()

    assert data["checkpoint"]["path"] == second.path and data["checkpoint"]["size_bytes"] > 0
    assert data["training_job"]["id"] == phase.jobs[2].id
    assert [c["id"] for c in data["lineage"]] == [base.id, first.id, second.id]
    assert data["children"] == []
    assert [e["id"] for e in data["evaluations"]] == [phase.tests[1].id]
    assert data["mean_at_k_by_split"]["test"]["mean_at_k"] == 0.5

    middle = client.get(f"/api/checkpoints/{first.id}").json()
    assert [c["id"] for c in middle["children"]] == [second.id]
    # the skipped step sampled under it too: two train-split evaluations, newest first
    ids = [e["id"] for e in middle["evaluations"]]
    assert ids == sorted(ids, reverse=True) and len(ids) == 2

    root = client.get(f"/api/checkpoints/{base.id}").json()
    assert root["training_job"] is None and [c["id"] for c in root["lineage"]] == [base.id]
    assert [c["id"] for c in root["children"]] == [first.id]


def test_run_has_its_weight_phase(store, client):
    """A `whale train` run: its steps have no phase row, one section holds them all."""
    phase = weight_phase(store, [PASS2_FAIL2, ["fail", "fail"], ["pass", "pass"]])

    data = client.get(f"/api/runs/{phase.run.id}").json()
    [wp] = data["weight_phases"]

    assert wp["phase"] is None
    assert [j["step"] for j in wp["jobs"]] == [0, 1, 2]
    assert [j["status"] for j in wp["jobs"]] == ["done", "skipped", "done"]
    assert wp["jobs"][1]["checkpoint_out"] is None
    assert (wp["rollouts_used"], wp["n_accepted"], wp["accept_rate"]) == (8, 4, 0.5)
    assert wp["checkpoint_in"]["id"] == phase.base.id
    assert [c["id"] for c in wp["checkpoints_made"]] == [c.id for c in phase.checkpoints]
    curves = data["dashboard"]["curves"]  # the run's curves are the dashboard's
    assert [p["x"] for p in curves["test"][next(iter(curves["test"]))]] == [0, 8]  # rollouts
    assert [p["y"] for p in curves["training"]["train/accept_rate"]] == [0.5, 0.0, 1.0]


def test_each_weight_phase_of_a_loop_run_has_its_section(store, client):
    first, second = loop_weight_phases(store, [[PASS2_FAIL2, ["pass"] * 4], [["fail"] * 4]])

    sections = client.get(f"/api/runs/{first.run.id}").json()["weight_phases"]

    assert [(s["phase"]["kind"], s["phase"]["round"]) for s in sections] == [
        ("weight", 1),
        ("weight", 2),
    ]
    one, two = sections
    assert [j["step"] for j in one["jobs"]] == [0, 1] and [j["step"] for j in two["jobs"]] == [2]
    assert (one["accept_rate"], two["accept_rate"]) == (0.75, 0.0)
    assert [c["id"] for c in one["checkpoints_made"]] == [c.id for c in first.checkpoints]
    assert two["checkpoints_made"] == []  # nothing accepted: nothing trained
    assert two["checkpoint_in"]["id"] == first.checkpoints[-1].id
    job = client.get(f"/api/training/{second.jobs[0].id}").json()
    assert job["phase"] == {
        "id": second.row.id,
        "run_id": first.run.id,
        "kind": "weight",
        "round": 2,
    }


def test_run_without_training_has_no_weight_phase(store, client):
    run = store.run()
    assert client.get(f"/api/runs/{run.id}").json()["weight_phases"] == []


@pytest.mark.parametrize(
    "url, detail",
    [
        ("/api/training/999", "Training job 999 not found"),
        ("/api/checkpoints/999", "Checkpoint 999 not found"),
    ],
)
def test_unknown_ids_are_404(client, url, detail):
    response = client.get(url)
    assert response.status_code == 404
    assert response.json() == {"detail": detail}


@pytest.mark.parametrize(
    "url, mentions",
    [
        ("/api/training/abc", "job_id"),
        ("/api/training/1.5", "job_id"),
        ("/api/training/99999999999999999999", "job_id"),  # beyond SQLite's 64-bit ids
        ("/api/checkpoints/x", "checkpoint_id"),
        ("/api/checkpoints/99999999999999999999", "checkpoint_id"),
        ("/training/abc", "job_id"),
        ("/training/abc/live", "job_id"),
        ("/checkpoints/%00", "checkpoint_id"),
    ],
)
def test_malformed_ids_are_422(client, url, mentions):
    response = client.get(url)
    assert response.status_code == 422
    assert mentions in error_detail(response)


def test_a_job_shows_what_it_trained_from_sampled_ids_rendering_and_drift(store, client):
    """Per RFT step, the page and its JSON give the three counts; rendered examples say why."""
    phase = weight_phase(store, [PASS2_FAIL2] * 3)
    sampled, fell_back, before = phase.jobs
    store.write_values(sampled, n_from_ids=2, n_rendered=0, n_drift=1, n_drift_checked=6)
    store.write_values(fell_back, n_from_ids=0, n_rendered=3, n_drift=0, n_drift_checked=0)

    tokens = client.get(f"/api/training/{sampled.id}").json()["tokens"]
    assert tokens == {
        "from_ids": 2,
        "rendered": 0,
        "drift": 1,
        "drift_checked": 6,
        "drift_rate": 1 / 6,
        "fell_back": None,
    }
    page = client.get(f"/training/{sampled.id}").text
    assert 'id="from-ids">2 examples' in page and 'id="drift">1 of 6 calls' in page
    tokens = client.get(f"/api/training/{fell_back.id}").json()["tokens"]
    assert (tokens["from_ids"], tokens["rendered"], tokens["drift_rate"]) == (0, 3, None)
    assert "returned no token ids" in tokens["fell_back"]
    page = client.get(f"/training/{fell_back.id}").text
    assert 'id="rendered">3 examples' in page and "returned no token ids" in page
    # a job trained before the counts were kept (or not trained yet) shows none
    assert client.get(f"/api/training/{before.id}").json()["tokens"] is None
    assert "token-sources" not in client.get(f"/training/{before.id}").text
