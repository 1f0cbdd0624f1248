"""Every refusal of a page's form or button comes back as a readable fragment shown in place,
beside what sent it: htmx swaps no 4xx or 5xx by itself, so without this a stale page's CSRF
token or an unknown run left the page as it was, silently.
A browser's own navigation still gets a whole error page, and the API its JSON."""

import asyncio
import html
import re

import pytest
from fastapi.testclient import TestClient

from app.loop.manager import LoopWorker
from app.server import create_app
from tests.conftest import AUTH, WEB_TOKEN
from tests.web.test_dashboard_pages import csrf_token, loop_run

ARITH = 'name = "refused"\ndomain = "arith"\n'


def htmx(client, token: str | None = None) -> dict[str, str]:
    """The headers a page's htmx sends: its CSRF token (the page's, maybe a stale one)."""
    return {"HX-Request": "true", "X-CSRF-Token": token or csrf_token(client)}


def shown(response) -> str:
    """The refusal as a reader sees it: one fragment, marked for the page's refusal slot."""
    assert response.headers["content-type"].startswith("text/html")
    assert response.headers["X-Refusal"] == str(response.status_code)
    fragment = response.text.strip()
    assert fragment.startswith('<p class="box box-error refusal"') and "<html" not in fragment
    return html.unescape(re.sub(r"<[^>]+>", "", fragment))


def test_the_forms_name_where_their_refusals_show(store, client):
    runs = client.get("/runs").text
    start = runs.index('<form hx-post="/runs"')
    form = runs[start : runs.index("</form>", start)]
    assert 'data-refusals="#start-refusal"' in form and 'id="start-refusal"' in form
    run = loop_run(store, "steered")
    page = client.get(f"/runs/{run.id}").text
    assert 'id="controls" data-refusals="#control-refusal"' in page
    # the slot is outside the part that refreshes every 2 s, so the message stays
    assert page.index('id="control-refusal"') < page.index('<section id="run-live"')
    assert "htmx:beforeSwap" in page and 'getResponseHeader("X-Refusal")' in page


def test_a_control_for_an_unknown_run_says_so_in_place(client):
    response = client.post("/runs/999/control", headers=htmx(client), data={"action": "pause"})
    assert response.status_code == 404
    assert shown(response) == "refused (HTTP 404): Run 999 not found"
    # a browser opening the URL itself still gets a page, the API its JSON
    page = client.post(
        "/runs/999/control", headers={"X-CSRF-Token": csrf_token(client)}, data={"action": "pause"}
    )
    assert page.status_code == 404 and "<html" in page.text and "Run 999 not found" in page.text
    api = client.post("/api/runs/999/pause", headers={"X-CSRF-Token": csrf_token(client)}, json={})
    assert api.json() == {"detail": "Run 999 not found"}


def test_a_malformed_control_says_what_is_wrong_in_place(store, client):
    run = loop_run(store, "steered")
    response = client.post(
        f"/runs/{run.id}/control", headers=htmx(client), data={"action": "pause", "x": "tokens"}
    )
    assert response.status_code == 422
    assert shown(response).startswith("refused (HTTP 422): x: Input should be")


def test_a_stale_page_is_told_its_csrf_token_is_wrong(store, client):
    """A page left open across a server restart carries the old server's token."""
    run = loop_run(store, "steered")
    stale = htmx(client, token="from-the-server-before")
    control = client.post(f"/runs/{run.id}/control", headers=stale, data={"action": "stop"})
    start = client.post("/runs", headers=stale, data={"experiment": ARITH})
    for response in (control, start):
        assert response.status_code == 403
        assert shown(response) == (
            "refused (HTTP 403): a POST needs the header X-CSRF-Token with this server's CSRF "
            "token; this page is older than the server (restarted?): reload the page and try "
            "again."
        )
    assert client.get(f"/api/runs/{run.id}").json()["run"]["desired"] == "running"


def test_a_model_server_that_fails_to_start_is_shown_on_the_run_page(workbench):
    """The form only stores the run; the loop process loads the model for it, and when that
    fails the run's page says so, with why (its log too), instead of the run waiting mutely."""

    async def no_model():
        raise RuntimeError("the docker sandbox is not available: no engine answers")

    workbench.start = no_model  # what the first run of a server waits for fails
    client = TestClient(
        create_app(workbench, token=WEB_TOKEN),
        base_url="http://localhost",
        headers=AUTH,
        raise_server_exceptions=False,
    )
    response = client.post("/runs", headers=htmx(client), data={"experiment": ARITH})
    assert response.status_code == 204
    run_page = response.headers["HX-Redirect"]
    with pytest.raises(RuntimeError, match="no engine answers"):
        asyncio.run(LoopWorker(workbench).pick_up())
    waiting = client.get("/api" + run_page).json()["dashboard"]["waiting"]
    assert waiting["text"].startswith("the model server did not start")
    assert waiting["why"] == (
        "RuntimeError: the docker sandbox is not available: no engine answers"
    )
    page = client.get(run_page).text
    assert "the model server did not start" in page and "no engine answers" in page


def test_a_refused_experiment_still_comes_back_as_the_form(client):
    """The start form's own refusal (422, the experiment's error) keeps replacing the form with
    itself, the text kept: it is not a refusal fragment."""
    response = client.post("/runs", headers=htmx(client), data={"experiment": "name = 3\n"})
    assert response.status_code == 422 and "X-Refusal" not in response.headers
    assert response.text.strip().startswith('<details class="start-run" id="start-run"')
