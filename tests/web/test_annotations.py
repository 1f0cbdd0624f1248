"""Tags and notes on runs, labels and notes on rollouts, and the candidates' lines of a harness
phase: written through the JSON API and the pages' htmx forms, read back from a real store by
the real app (the runs list's tag filter, the rollout filter, the text search, the harness
page's counts, the export)."""

import csv
import io
import json

from sqlmodel import select

from app.db.schema import Evaluation, SearchIteration
from app.report.export import export_run
from app.web.charts import candidate_chart
from tests.api.synthetic_lineage import search_run
from tests.web.test_dashboard_pages import csrf_token


def headers(client) -> dict[str, str]:
    return {"X-CSRF-Token": csrf_token(client)}


def htmx(client) -> dict[str, str]:
    return {**headers(client), "HX-Request": "true"}


def put(client, path: str, body: dict):
    return client.put(f"/api{path}/annotations", json=body, headers=headers(client))


def test_tags_and_a_note_from_the_api_filter_the_runs_list_and_show_the_first_line(store, client):
    tagged, other = store.run("baseline seed 1"), store.run("other run")
    answer = put(
        client,
        f"/runs/{tagged.id}",
        {"tags": [" baseline ", "seed  3"], "note": "\nlr too high?\nsee run 4"},
    )
    assert answer.status_code == 200, answer.text
    assert answer.json() == {
        "run_id": tagged.id,
        "tags": ["baseline", "seed 3"],
        "note": "lr too high?\nsee run 4",
    }

    runs = {r["id"]: r for r in client.get("/api/runs").json()["runs"]}
    assert runs[tagged.id]["tags"] == ["baseline", "seed 3"]
    assert runs[tagged.id]["note_line"] == "lr too high?"
    assert runs[other.id]["tags"] == [] and runs[other.id]["note_line"] is None
    assert client.get("/api/runs").json()["tags"] == [
        {"tag": "baseline", "runs": 1},
        {"tag": "seed 3", "runs": 1},
    ]

    only = client.get("/api/runs", params={"tag": "seed 3"}).json()
    assert [r["id"] for r in only["runs"]] == [tagged.id] and only["tag"] == "seed 3"
    live = client.get("/api/runs/live", params={"tag": "baseline"}).json()
    assert [r["id"] for r in live["runs"]] == [tagged.id]
    assert client.get("/api/runs", params={"tag": "nothing"}).json()["runs"] == []
    assert len(client.get("/api/runs", params={"tag": ""}).json()["runs"]) == 2  # the blank choice

    page = client.get("/runs", params={"tag": "baseline"}).text
    assert "baseline seed 1" in page and "other run" not in page
    assert "lr too high?" in page and "see run 4" not in page  # the first line only
    assert 'hx-get="/runs/live?tag=baseline"' in page  # the poll keeps the filter

    # a note alone leaves the tags as they were
    put(client, f"/runs/{tagged.id}", {"note": ""})
    run = client.get(f"/api/runs/{tagged.id}").json()
    assert run["annotations"] == {"tags": ["baseline", "seed 3"], "note": None}


def test_the_run_page_form_saves_tags_and_note_in_place(store, client):
    run = store.run("to annotate")
    page = client.get(f"/runs/{run.id}").text
    assert f'hx-post="/runs/{run.id}/annotations"' in page

    answer = client.post(
        f"/runs/{run.id}/annotations",
        data={"tags": "baseline, lr 1e-5, baseline,", "note": "first\r\nsecond"},
        headers=htmx(client),
    )
    assert answer.status_code == 200, answer.text
    assert 'href="/runs?tag=lr%201e-5"' in answer.text
    assert client.get(f"/api/runs/{run.id}").json()["annotations"] == {
        "tags": ["baseline", "lr 1e-5"],
        "note": "first\nsecond",
    }


def test_bad_text_is_refused_saying_why_and_changes_nothing(store, client):
    run = store.run("kept")
    put(client, f"/runs/{run.id}", {"tags": ["kept"], "note": "kept note"})
    refusals = [
        ({"tags": ["x" * 41]}, "at most 40"),
        ({"tags": [f"t{i}" for i in range(21)]}, "at most 20"),
        ({"tags": ["a,b"]}, "comma"),
        ({"note": "bell\x07"}, "control characters"),
        ({"note": "x" * 5001}, "at most 5,000"),
    ]
    for body, why in refusals:
        answer = put(client, f"/runs/{run.id}", body)
        assert answer.status_code == 422 and why in answer.json()["detail"], (body, answer.text)
    assert put(client, "/runs/999", {"tags": ["a"]}).status_code == 404

    form = client.post(
        f"/runs/{run.id}/annotations",
        data={"tags": "y" * 50, "note": "typed and kept"},
        headers=htmx(client),
    )
    assert form.status_code == 422
    assert "at most 40" in form.text and "typed and kept" in form.text and "y" * 50 in form.text
    assert client.get(f"/api/runs/{run.id}").json()["annotations"] == {
        "tags": ["kept"],
        "note": "kept note",
    }


def test_user_text_is_shown_escaped(store, client):
    run = store.run("escaped")
    put(client, f"/runs/{run.id}", {"tags": ["<b>x</b>"], "note": "<script>alert(1)</script>"})
    for page in (client.get("/runs").text, client.get(f"/runs/{run.id}").text):
        assert "<script>alert(1)" not in page and "<b>x</b>" not in page
        assert "&lt;script&gt;alert(1)" in page and "&lt;b&gt;x&lt;/b&gt;" in page


def labelled_run(store):
    run = store.run("search arith")
    harness, checkpoint = store.harness(run), store.checkpoint()
    evaluation = store.evaluation(run, harness, checkpoint, n_tasks=4)
    rollouts = store.rollouts(evaluation, ["fail", "pass", "fail", "pending"])
    return run, harness, rollouts


def test_a_label_filters_the_rollouts_is_counted_per_harness_and_found_by_the_search(store, client):
    run, harness, (missed, passed, other_fail, pending) = labelled_run(store)
    answer = put(
        client,
        f"/rollouts/{missed.id}",
        {"labels": ["retrieval miss"], "note": "the retriever returned the wrong page"},
    )
    assert answer.json() == {
        "rollout_id": missed.id,
        "labels": ["retrieval miss"],
        "note": "the retriever returned the wrong page",
    }
    put(client, f"/rollouts/{other_fail.id}", {"labels": ["format error"]})

    listed = client.get("/api/rollouts", params={"run": run.id, "label": "retrieval miss"}).json()
    assert [i["id"] for i in listed["items"]] == [missed.id]
    assert listed["items"][0]["labels"] == ["retrieval miss"]
    assert listed["status_counts"] is None  # the counts would be the whole run's
    everything = client.get("/api/rollouts", params={"run": run.id}).json()
    assert {i["id"]: i["labels"] for i in everything["items"]}[passed.id] == []
    assert everything["choices"]["labels"] == [
        {"label": "format error", "rollouts": 1},
        {"label": "retrieval miss", "rollouts": 1},
    ]
    page = client.get("/rollouts", params={"run": run.id, "label": "format error"}).text
    assert (
        f'href="/rollouts/{other_fail.id}"' in page and f'href="/rollouts/{missed.id}"' not in page
    )

    # the text search reads labels and notes too (the answers all say "nope")
    for q, found in (
        ("RETRIEVAL", [missed.id]),
        ("wrong page", [missed.id]),
        ("format", [other_fail.id]),
    ):
        items = client.get("/api/rollouts", params={"run": run.id, "q": q}).json()["items"]
        assert [i["id"] for i in items] == found, q

    # another harness's labelled rollout counts on its own page, not on this one's
    other = store.harness(run, name="other.py", code="def run(task, llm, tools):\n    return 1\n")
    [elsewhere] = store.rollouts(store.evaluation(run, other, store.checkpoint(), 1), ["fail"])
    put(client, f"/rollouts/{elsewhere.id}", {"labels": ["retrieval miss"]})
    elsewhere_counts = client.get(f"/api/harnesses/{other.id}").json()["labels"]
    assert elsewhere_counts == [{"label": "retrieval miss", "rollouts": 1}]
    counts = client.get(f"/api/harnesses/{harness.id}").json()["labels"]
    assert counts == [
        {"label": "format error", "rollouts": 1},
        {"label": "retrieval miss", "rollouts": 1},
    ]
    harness_page = client.get(f"/harnesses/{harness.id}").text
    assert f'href="/rollouts?harness={harness.id}&amp;label=retrieval%20miss"' in harness_page

    trace = client.get(f"/api/rollouts/{missed.id}").json()
    assert trace["annotations"]["labels"] == ["retrieval miss"]
    assert "the retriever returned the wrong page" in client.get(f"/rollouts/{missed.id}").text

    refused = put(client, f"/rollouts/{pending.id}", {"labels": ["x"]})
    assert refused.status_code == 409 and "has not finished" in refused.json()["detail"]
    assert put(client, "/rollouts/999", {"labels": ["x"]}).status_code == 404


def test_the_trace_page_form_labels_a_rollout(store, client):
    run, _, (missed, *_) = labelled_run(store)
    assert (
        f'hx-post="/rollouts/{missed.id}/annotations"' in client.get(f"/rollouts/{missed.id}").text
    )
    answer = client.post(
        f"/rollouts/{missed.id}/annotations",
        data={"labels": "format error, retrieval miss", "note": ""},
        headers=htmx(client),
    )
    assert answer.status_code == 200, answer.text
    assert f'href="/rollouts?run={run.id}&amp;label=format%20error"' in answer.text
    filtered = client.get("/api/rollouts", params={"label": "format error"}).json()["items"]
    assert [i["id"] for i in filtered] == [missed.id]


def test_the_export_carries_tags_notes_and_labels(store, client, workbench, tmp_path):
    run, _, (missed, passed, *_) = labelled_run(store)
    put(client, f"/runs/{run.id}", {"tags": ["baseline"], "note": "why this run"})
    put(client, f"/rollouts/{missed.id}", {"labels": ["retrieval miss"], "note": "wrong page"})
    with workbench.session() as s:
        export_run(s, run.id, tmp_path / "out")
    exported = json.loads((tmp_path / "out" / "run.json").read_text())
    assert exported["tags"] == ["baseline"] and exported["note"] == "why this run"
    lines = (tmp_path / "out" / "rollouts.jsonl").read_text().splitlines()
    rollouts = {r["id"]: r for r in map(json.loads, lines)}
    assert rollouts[missed.id]["labels"] == ["retrieval miss"]
    assert rollouts[missed.id]["note"] == "wrong page"
    assert rollouts[passed.id]["labels"] == [] and rollouts[passed.id]["note"] is None


def with_intervals(store, phase, intervals: dict) -> None:
    """Give the phase's evaluations a 95% interval each (harness id -> (low, high))."""

    def write(s):
        for e in s.exec(select(Evaluation).where(Evaluation.phase_id == phase.id)):
            e.ci_low, e.ci_high = intervals[e.harness_id]

    store.writer.submit(write).result()


def frontier(*entries):
    return [{"harness_id": h.id, "success": s, "turns": 1.5} for h, s in entries]


def test_a_harness_phase_draws_one_line_per_candidate_the_accepted_marked(store, client):
    lineage = search_run(store)
    phase, seed, a, c, d = lineage.phase1, lineage.seed, lineage.a, lineage.c, lineage.d
    with_ci = {seed.id: (0.02, 0.3), a.id: (0.2, 0.62), c.id: (0.35, 0.81), d.id: (0.12, 0.55)}
    with_intervals(store, phase, with_ci)
    # after iteration 1 the program (a) tops the frontier; after 2 the examples (c), with a
    # still on it (pretend it takes fewer turns)
    for iteration, front in ((0, [(seed, 0.1)]), (1, [(a, 0.4)]), (2, [(c, 0.6), (a, 0.4)])):
        store.write(
            SearchIteration(
                run_id=lineage.run.id,
                phase_id=phase.id,
                iteration=iteration,
                proposer="llm",
                status="done",
                accepted_harness_id=c.id if iteration == 2 else None,
                frontier=frontier(*front),
            )
        )
    data = client.get(f"/api/runs/{lineage.run.id}").json()
    [first] = [hp for hp in data["harness_phases"] if hp["phase"]["id"] == phase.id]
    lines = {line["harness_id"]: line for line in first["candidate_lines"]}
    assert set(lines) == {seed.id, a.id, c.id, d.id}  # the invalid one (b) has no score
    assert [p["x"] for p in lines[a.id]["points"]] == [1, 2]  # proposed at 1, on the front at 2
    assert [p["x"] for p in lines[seed.id]["points"]] == [0]
    assert [p["x"] for p in lines[d.id]["points"]] == [2]
    assert lines[c.id]["points"] == [{"x": 2, "y": 0.6, "low": 0.35, "high": 0.81}]
    assert [i for i, line in lines.items() if line["accepted"]] == [c.id]
    assert lines[seed.id]["incoming"]

    svg = str(candidate_chart(first["candidate_lines"], final=True))
    assert svg.count("<polyline") == 4 and svg.count('class="chart-ci"') == 5  # a point each
    assert f"#{c.id} examples (accepted)" in svg and "(incoming)" in svg
    assert f'href="/harnesses/{a.id}"' in svg
    page = client.get(f"/runs/{lineage.run.id}").text
    assert f'id="candidate-lines-{phase.id}"' in page and "examples (accepted)" in page
    # without search iterations recorded (phase 2 here), each scored candidate is one point
    [second] = [hp for hp in data["harness_phases"] if hp["phase"]["id"] == lineage.phase2.id]
    assert all(len(line["points"]) == 1 for line in second["candidate_lines"])


def test_the_list_downloads_carry_the_labels_and_filter_by_them(store, client):
    run, _, (missed, passed, *_) = labelled_run(store)
    put(client, f"/rollouts/{missed.id}", {"labels": ["retrieval miss", "slow"], "note": "n"})
    jsonl = client.get("/api/rollouts.jsonl", params={"run": run.id, "label": "slow"}).text
    [line] = [json.loads(row) for row in jsonl.splitlines()]
    assert line["id"] == missed.id and line["labels"] == ["retrieval miss", "slow"]
    table = client.get("/api/rollouts.csv", params={"run": run.id, "calls": "false"}).text
    rows = {int(r["id"]): r for r in csv.DictReader(io.StringIO(table))}
    assert (
        rows[missed.id]["labels"] == '["retrieval miss", "slow"]' and rows[missed.id]["note"] == "n"
    )
    assert rows[passed.id]["labels"] == "[]" and rows[passed.id]["note"] == ""


def test_a_pending_rollout_offers_no_label_form(store, client):
    *_, (_, _, _, pending) = labelled_run(store)
    page = client.get(f"/rollouts/{pending.id}").text
    assert "labelled once it has finished" in page
    assert f'hx-post="/rollouts/{pending.id}/annotations"' not in page
