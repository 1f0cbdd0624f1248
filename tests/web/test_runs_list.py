"""The runs list keeps up: it polls its own table while a run can change (every 2 s; every
10 s when none can, so a run started elsewhere still shows), the table comes back with the
runs' new state, and the boxes ticked for comparing stay ticked."""

import re

from app.db.schema import Event, Run
from tests.web.test_dashboard_pages import loop_run


def polled(page: str) -> str:
    """The polled element's opening tag."""
    return re.search(r'<div id="runs-live"[^>]*>', page).group(0)


def row(page: str, run_id: int) -> str:
    start = page.index(f'value="{run_id}"')
    return page[start : page.index("</tr>", start)]


def test_the_runs_list_polls_while_a_run_runs_and_its_table_shows_the_new_state(store, client):
    done = loop_run(store, "finished", status="done")
    live = loop_run(store, "going")

    tag = polled(client.get("/runs").text)
    assert 'hx-get="/runs/live"' in tag and 'hx-trigger="every 2s"' in tag
    assert 'hx-include="closest form"' in tag  # the ticked boxes go along
    assert "running" in row(client.get("/runs").text, live.id)

    store.write_values(live, status="stopped")
    fragment = client.get(f"/runs/live?ids={done.id}&x=rollouts")
    assert fragment.status_code == 200 and "<html" not in fragment.text
    assert "stopped" in row(fragment.text, live.id) and "running" not in row(fragment.text, live.id)
    assert " checked" in row(fragment.text, done.id) and " checked" not in row(
        fragment.text, live.id
    )
    # nothing can change now: it still looks, less often
    assert 'hx-trigger="every 10s"' in polled(fragment.text)
    data = client.get(f"/api/runs/live?ids={done.id}").json()
    assert data["ids"] == [done.id]
    assert {r["id"]: (r["status"], r["live"]) for r in data["runs"]} == {
        live.id: ("stopped", False),
        done.id: ("done", False),
    }


def test_a_run_started_elsewhere_shows_up_on_an_empty_list(store, client):
    page = client.get("/runs").text
    assert "No runs yet" in page and 'hx-trigger="every 10s"' in polled(page)
    run = store.write(Run(name="from the cli", kind="experiment", domain="arith", status="running"))
    fragment = client.get("/runs/live").text
    assert "from the cli" in row(fragment, run.id) and 'hx-trigger="every 2s"' in polled(fragment)


def test_the_event_log_shows_phase_starts_and_when_the_run_paused_and_resumed(store, client):
    run = loop_run(store, "held")
    store.write(
        Event(run_id=run.id, kind="control", detail={"action": "pause", "source": "web"}),
        Event(run_id=run.id, kind="paused", detail={}),
        Event(run_id=run.id, kind="control", detail={"action": "resume", "source": "web"}),
        Event(run_id=run.id, kind="resumed", detail={}),
        Event(
            run_id=run.id,
            kind="phase_start",
            detail={
                "phase_id": 9,
                "kind": "weight",
                "round": 2,
                "harness_id": 4,
                "checkpoint_id": 3,
            },
        ),
    )
    log = [e["text"] for e in client.get(f"/api/runs/{run.id}/events").json()][-5:]
    assert log == [
        "pause asked from web",
        "paused: nothing was running any more, nothing new starts",
        "resume asked from web",
        "resumed: running again",
        "weight phase 2 started from harness 4, checkpoint 3",
    ]
    page = client.get(f"/runs/{run.id}").text
    shown = re.findall(r'<li class="event-(paused|resumed|phase_start)">', page)
    assert shown == ["phase_start", "resumed", "paused"]  # newest first
