"""Malformed requests answer 4xx with a message, never 500: JSON for the API, a page for a
browser."""

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
    if url.startswith("/api/"):
        assert mentions in response.json()["detail"]
    else:  # a page saying what is wrong, inside the site's layout
        assert response.headers["content-type"].startswith("text/html")
        assert "Cannot show this" in response.text and mentions in response.text


def test_an_unknown_path_is_a_page_for_a_browser_and_json_for_the_api(client):
    page = client.get("/nonexistent")
    assert page.status_code == 404 and page.headers["content-type"].startswith("text/html")
    assert "<h1>Not found</h1>" in page.text and 'href="/runs"' in page.text
    api = client.get("/api/nonexistent")
    assert api.status_code == 404 and api.json() == {"detail": "Not Found"}


def test_huge_id_is_not_found_rather_than_an_error(client):
    assert client.get("/api/runs/99999999999").status_code == 404
