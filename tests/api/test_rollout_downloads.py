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
    # the items of the JSON list, all of them, in id order (and their calls: none here)
    assert [line.pop("steps") for line in lines] == [[]] * len(listed)
    assert lines == [in_z(item) for item in listed]

    answer = client.get("/api/rollouts.csv", params=params)
    assert answer.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(answer.text)))
    assert list(rows[0]) == [*CSV_COLUMNS, "steps"]
    assert [int(r["id"]) for r in rows] == [i["id"] for i in listed]
    assert {r["status"] for r in rows} == {"fail"} and {r["run_id"] for r in rows} == {str(run1.id)}
    first = rows[0]
    assert json.loads(first["task"]) == listed[0]["task"]  # a nested value: its JSON
    assert first["harness_name"] == "seed.py" and first["reason"] == ""  # none: empty


def in_z(item: dict) -> dict:
    """The list item with its times as the files write them: UTC, ending in Z."""
    return {
        k: v.replace("+00:00", "Z") if isinstance(v, str) and v.endswith("+00:00") else v
        for k, v in item.items()
    }


def test_the_files_carry_the_calls_as_the_export_does_and_its_times(store, client, workbench):
    from app.report.export import export_run

    run = store.run()
    evaluation = store.evaluation(run, store.harness(run), store.checkpoint(), 1)
    [rollout] = store.rollouts(evaluation, ["pass"])
    store.write_values(rollout, finished_at=rollout.created_at)
    asked = [{"role": "user", "content": "What is 0 + 1?"}]
    store.model_step(rollout, 0, asked, "1", temperature=0.7)
    store.tool_step(rollout, 1, "calc", ["0 + 1"], result=1)
    out = workbench.settings.home / "export"
    out.mkdir(parents=True)
    with workbench.session() as s:
        export_run(s, run.id, out)
    exported = json.loads((out / "rollouts.jsonl").read_text().splitlines()[0])

    [line] = [
        json.loads(x) for x in client.get(f"/api/rollouts.jsonl?run={run.id}").text.splitlines()
    ]
    assert [(c["kind"], c["idx"]) for c in line["steps"]] == [("model", 0), ("tool", 1)]
    assert line["steps"][0]["request"]["messages"] == asked
    assert line["steps"][0]["response"]["message"]["content"] == "1"
    assert line["steps"] == exported["steps"]  # the export's calls, field for field
    # one time format: the export's
    assert line["created_at"] == exported["created_at"] and line["created_at"].endswith("Z")
    assert line["finished_at"].endswith("Z") and line["steps"][1]["created_at"].endswith("Z")

    [row] = csv.DictReader(io.StringIO(client.get(f"/api/rollouts.csv?run={run.id}").text))
    assert json.loads(row["steps"]) == exported["steps"] and row["created_at"].endswith("Z")
    short = client.get(f"/api/rollouts.jsonl?run={run.id}&calls=false").text
    assert "steps" not in json.loads(short)
    assert "steps" not in next(
        csv.reader(io.StringIO(client.get(f"/api/rollouts.csv?run={run.id}&calls=false").text))
    )


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
