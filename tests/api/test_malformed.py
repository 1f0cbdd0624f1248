"""Malformed requests answer 4xx with a JSON message, never 500."""

import pytest


@pytest.mark.parametrize(
    "url, mentions",
    [
        ("/api/runs/abc", "run_id"),
        ("/api/harnesses/1.5", "harness_id"),
        ("/api/rollouts/x", "rollout_id"),
        ("/api/rollouts?status=bogus", "status"),
        ("/api/rollouts?after=-1", "after"),
        ("/api/rollouts?before=two", "before"),
        ("/api/rollouts?after=1&before=9", "after and before"),
        ("/api/rollouts?run=first", "run"),
        ("/api/rollouts?evaluation=%00", "evaluation"),
        # beyond SQLite's 64-bit ids: malformed, not a database overflow
        ("/api/runs/99999999999999999999", "run_id"),
        ("/api/harnesses/99999999999999999999", "harness_id"),
        ("/api/rollouts/99999999999999999999", "rollout_id"),
        ("/api/rollouts?run=99999999999999999999", "run"),
        ("/rollouts/99999999999999999999", "rollout_id"),
        # the HTML pages refuse the same input the same way
        ("/runs/abc", "run_id"),
        ("/rollouts?status=PASS", "status"),
        ("/rollouts?after=-3", "after"),
    ],
)
def test_malformed_request_is_a_422_with_a_message(client, url, mentions):
    response = client.get(url)
    assert response.status_code == 422
    assert mentions in response.json()["detail"]


def test_huge_id_is_not_found_rather_than_an_error(client):
    assert client.get("/api/runs/99999999999").status_code == 404
