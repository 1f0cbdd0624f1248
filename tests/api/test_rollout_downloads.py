"""The rollout list as a file: /api/rollouts.jsonl and /api/rollouts.csv hold every rollout the
list's filters match (not one page), with the list's columns; the list page links both with its
filters."""

import csv
import io
import json

from app.read.rollout_download import CSV_COLUMNS
from app.read.rollouts import PAGE_SIZE
from tests.api.test_rollouts import walk, world  # noqa: F401 - fixture
from tests.conftest import error_detail


def test_the_files_hold_every_match_with_the_lists_columns(store, client, world):  # noqa: F811
    run1, run2 = world["runs"]
    seed = world["harnesses"][0]
    many = store.evaluation(run1, seed, world["checkpoints"][0], PAGE_SIZE + 10)
    store.rollouts(many, ["fail"] * (PAGE_SIZE + 10))  # more than a page
    params = {"run": run1.id, "status": "fail"}
    listed = walk(client, **params)  # every page of the list
    assert len(listed) > PAGE_SIZE

    jsonl = client.get("/api/rollouts.jsonl", params=params)
    assert jsonl.headers["content-type"].startswith("application/x-ndjson")
    disposition = jsonl.headers["content-disposition"]
    assert disposition == f'attachment; filename="rollouts-run-{run1.id}.jsonl"'
    lines = [json.loads(line) for line in jsonl.text.splitlines()]
    assert lines == listed  # the items of the JSON list, all of them, in id order

    answer = client.get("/api/rollouts.csv", params=params)
    assert answer.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(answer.text)))
    assert list(rows[0]) == CSV_COLUMNS
    assert [int(r["id"]) for r in rows] == [i["id"] for i in listed]
    assert {r["status"] for r in rows} == {"fail"} and {r["run_id"] for r in rows} == {str(run1.id)}
    first = rows[0]
    assert json.loads(first["task"]) == listed[0]["task"]  # a nested value: its JSON
    assert first["harness_name"] == "seed.py" and first["reason"] == ""  # none: empty


def test_the_files_take_names_and_text_and_refuse_what_the_list_refuses(client, world):  # noqa: F811
    run1, _ = world["runs"]
    tuned = world["harnesses"][1]
    by_name = client.get(
        "/api/rollouts.jsonl", params={"run": run1.id, "harness": "tuned.py", "q": "forty"}
    )
    [line] = [json.loads(x) for x in by_name.text.splitlines()]
    assert (line["harness_id"], line["answer"]) == (tuned.id, "forty two")

    unknown = client.get("/api/rollouts.csv", params={"harness": 999})
    assert unknown.status_code == 404 and "999 not found" in error_detail(unknown)
    malformed = client.get("/api/rollouts.jsonl", params={"status": "failing"})
    assert malformed.status_code == 422 and "status" in error_detail(malformed)


def test_the_list_page_links_both_files_with_its_filters(client, world):  # noqa: F811
    run1, _ = world["runs"]
    page = client.get("/rollouts", params={"run": run1.id, "status": "fail", "after": 3}).text
    # the filters, not the page cursor: the file holds every match
    query = f"run={run1.id}&amp;status=fail"
    assert f'<a id="download-jsonl" href="/api/rollouts.jsonl?{query}" download>' in page
    assert f'<a id="download-csv" href="/api/rollouts.csv?{query}" download>' in page
