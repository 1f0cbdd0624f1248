"""The HTML pages over a synthetic store: what they show, their links, 404s, live polling."""

import re
from xml.etree import ElementTree

import pytest


@pytest.fixture
def evaluated(store):
    """A finished run: one evaluation with a passing and a failing rollout; the failing one
    has a two-call trace and a failed tool call."""
    run = store.run(name="eval seed.py", config={"k": 1, "limit": 2})
    harness = store.harness(run, name="seed.py")
    evaluation = store.evaluation(
        run,
        harness,
        store.checkpoint(),
        n_tasks=2,
        n_done=2,
        status="done",
        mean_at_k=0.5,
        mean_turns=2.0,
        total_tokens=50,
    )
    passed, failed = store.rollouts(evaluation, ["pass", "fail"])
    conversation = [
        {"role": "system", "content": "Solve the arithmetic problem."},
        {"role": "user", "content": "What is 1 + 1?"},
    ]
    store.model_step(failed, 0, conversation, "It is 3.", temperature=1.0, max_tokens=48)
    store.model_step(
        failed,
        1,
        conversation
        + [
            {"role": "assistant", "content": "It is 3."},
            {"role": "user", "content": "Only the number, please."},
        ],
        "3",
        temperature=0.2,
    )
    store.tool_step(failed, 2, "nope", ["3"], error="unknown tool 'nope'")
    return run, harness, evaluation, passed, failed


def test_runs_page_lists_runs_with_links(client, evaluated):
    run = evaluated[0]
    for url in ("/", "/runs"):
        page = client.get(url)
        assert page.status_code == 200
        assert f'href="/runs/{run.id}"' in page.text
        assert "0.500" in page.text  # best test mean@k


def test_run_page_links_status_counts_and_failures(client, evaluated):
    run, harness, _, passed, failed = evaluated

    page = client.get(f"/runs/{run.id}").text

    assert f'href="/harnesses/{harness.id}"' in page
    assert f'href="/rollouts?run={run.id}&amp;status=fail"' in page
    assert f'href="/rollouts/{failed.id}"' in page  # in "recent failures"
    assert f'href="/rollouts/{passed.id}"' not in page
    assert "every 2s" not in page  # a finished run does not poll


def test_running_run_polls_its_live_part_until_done(store, client):
    run = store.run(status="running")

    page = client.get(f"/runs/{run.id}").text
    fragment = client.get(f"/runs/{run.id}/live").text

    assert f'hx-get="/runs/{run.id}/live?x=rollouts"' in page
    assert 'hx-trigger="every 2s"' in fragment
    assert "<html" not in fragment  # a fragment, not a page

    store.writer.submit(lambda s: setattr(s.get(type(run), run.id), "status", "done")).result()
    assert "hx-trigger" not in client.get(f"/runs/{run.id}/live").text


def test_harness_page_highlights_code(client, evaluated):
    harness = evaluated[1]

    page = client.get(f"/harnesses/{harness.id}").text

    assert 'class="highlight"' in page
    assert '<span class="k">def</span>' in page  # pygments marked the keyword
    assert "/static/pygments.css" in page


def test_rollout_list_keeps_filters_in_links(store, client):
    run = store.run()
    evaluation = store.evaluation(run, store.harness(run), store.checkpoint(), n_tasks=60)
    rollouts = store.rollouts(evaluation, ["fail"] * 55 + ["pass"] * 5)

    page = client.get(f"/rollouts?run={run.id}&status=fail").text

    assert page.count('href="/rollouts/') == 50
    fiftieth = rollouts[49].id
    next_page = f"/rollouts?run={run.id}&status=fail&after={fiftieth}"
    assert f'href="{next_page.replace("&", "&amp;")}"' in page  # next page, keyset cursor
    assert f'href="/rollouts?run={run.id}&amp;status=pass"' in page  # status filter links
    assert f'href="/rollouts?run={run.id}"' in page  # "all"
    second = client.get(next_page).text
    assert second.count('href="/rollouts/') == 5
    assert "previous" in second and "next" not in second


def test_trace_page_shows_every_step(client, evaluated):
    failed = evaluated[4]

    page = client.get(f"/rollouts/{failed.id}").text

    assert "What is 1 + 1?" in page
    assert "It is 3." in page  # the first completion
    assert "Only the number, please." in page  # the second call's new message
    assert "temperature=0.2" in page
    assert "unknown tool &#39;nope&#39;" in page
    assert re.search(r"finish: stop", page)
    assert f'href="/api/rollouts/{failed.id}/raw" download=' in page


@pytest.mark.parametrize(
    "url", ["/runs/999", "/harnesses/999", "/rollouts/999", "/rollouts?run=999"]
)
def test_unknown_ids_get_a_readable_404_page(client, url):
    page = client.get(url)
    assert page.status_code == 404
    assert page.headers["content-type"].startswith("text/html")
    assert "999 not found" in page.text
    assert 'href="/runs"' in page.text


def test_static_assets_are_served_locally(client):
    assert "htmx" in client.get("/static/htmx.min.js").text[:200]
    assert client.get("/static/style.css").status_code == 200


def test_every_page_links_a_favicon_that_is_served(client, evaluated):
    run = evaluated[0]
    for url in ("/runs", f"/runs/{run.id}", "/runs/999"):  # an error page too
        assert '<link rel="icon" href="/static/favicon.svg"' in client.get(url).text
    # browsers also ask /favicon.ico on their own (a JSON view links nothing): no 404 there
    for url in ("/favicon.ico", "/static/favicon.svg"):
        icon = client.get(url)
        assert icon.status_code == 200, url
        assert icon.headers["content-type"].startswith("image/svg+xml")
        assert ElementTree.fromstring(icon.text).tag == "{http://www.w3.org/2000/svg}svg"
