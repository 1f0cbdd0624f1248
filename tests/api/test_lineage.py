"""GET /api/runs/{id}/lineage: the harness tree of a run across its harness phases, and
GET /api/harnesses/{id}: scores per checkpoint and split, the diff against a parent or a pick."""

from app.db.schema import Evaluation
from tests.api.synthetic_lineage import MISSING_RUN, SYNTAX_ERROR, search_run


def test_tree_has_every_harness_of_both_phases_and_their_parent_edges(store, client):
    r = search_run(store)

    data = client.get(f"/api/runs/{r.run.id}/lineage").json()

    nodes = {n["id"]: n for n in data["nodes"]}
    assert set(nodes) == {h.id for h in (r.seed, r.a, r.b, r.c, r.d, r.e, r.f, r.g)}
    edges = {(e["source"], e["target"], e["primary"]) for e in data["edges"]}
    assert edges == {
        (r.seed.id, r.a.id, True),
        (r.seed.id, r.b.id, True),
        (r.a.id, r.c.id, True),
        (r.a.id, r.d.id, True),
        (r.seed.id, r.d.id, False),  # d's second parent
        (r.c.id, r.e.id, True),
        (r.c.id, r.g.id, True),
        (r.a.id, r.f.id, True),  # a parent in the earlier phase
    }
    # where each sits: the seed is the incoming harness (iteration 0) of phase 1
    where = {n["id"]: (n["phase_round"], n["iteration"]) for n in data["nodes"]}
    assert where[r.seed.id] == (1, 0) and where[r.a.id] == (1, 1) and where[r.d.id] == (1, 2)
    assert where[r.f.id] == (2, 1)
    assert [p["round"] for p in data["phases"]] == [1, 2]  # harness phases only


def test_accepted_and_invalid_harnesses_are_marked(store, client):
    r = search_run(store)

    nodes = {n["id"]: n for n in client.get(f"/api/runs/{r.run.id}/lineage").json()["nodes"]}

    assert {i for i, n in nodes.items() if n["accepted"]} == {r.c.id, r.e.id}
    assert nodes[r.c.id]["accepted_in"] == [1] and nodes[r.e.id]["accepted_in"] == [2]
    assert nodes[r.c.id]["incoming_in"] == [2]
    assert not nodes[r.b.id]["valid"] and nodes[r.b.id]["error"] == SYNTAX_ERROR
    assert not nodes[r.g.id]["valid"] and nodes[r.g.id]["error"] == MISSING_RUN
    assert nodes[r.b.id]["success"] is None


def test_score_is_the_harness_split_under_the_checkpoint_of_its_own_phase(store, client):
    r = search_run(store)

    nodes = {n["id"]: n for n in client.get(f"/api/runs/{r.run.id}/lineage").json()["nodes"]}

    assert nodes[r.seed.id]["success"] == 0.10
    # accepted in phase 1 under c1 (0.60), re-scored as phase 2's incoming under c2 (0.65)
    assert nodes[r.c.id]["success"] == 0.60
    assert nodes[r.c.id]["rescored"] == [{"phase_round": 2, "success": 0.65}]
    assert nodes[r.e.id]["success"] == 0.80


def test_checkpoint_chain_runs_from_the_base_to_the_newest(store, client):
    r = search_run(store)

    data = client.get(f"/api/runs/{r.run.id}/lineage").json()

    assert [c["id"] for c in data["checkpoint_chain"]] == [r.base.id, r.c1.id, r.c2.id]
    assert [p["checkpoint"]["id"] for p in data["phases"]] == [r.c1.id, r.c2.id]


def test_lineage_of_an_unknown_run_is_404(client):
    response = client.get("/api/runs/404/lineage")
    assert response.status_code == 404
    assert response.json()["detail"] == "Run 404 not found"


def test_harness_diff_against_its_parent_by_default(store, client):
    r = search_run(store)

    diff = client.get(f"/api/harnesses/{r.a.id}").json()["diff"]

    assert diff["against"]["id"] == r.seed.id and diff["is_parent"]
    rows = [row for hunk in diff["hunks"] for row in hunk["rows"]]
    changed = [(row["old"], row["new"]) for row in rows if row["tag"] == "replace"]
    assert ('SOLVER = "direct"', 'SOLVER = "program"') in changed
    assert [row["new"] for row in rows if row["tag"] == "insert"] == [
        "    return str(eval(expression, {}))  # the harness computes"
    ]
    # the prompt and parse functions in between are folded, not shown
    assert len(diff["hunks"]) == 2 and diff["hunks"][1]["folded_before"] > 5
    assert not any("def parse" in (row["new"] or "") for row in rows)
    assert (diff["added"], diff["removed"]) == (3, 2)  # two lines changed, one added


def test_harness_diff_against_a_picked_harness_and_unknown_pick(store, client):
    r = search_run(store)

    diff = client.get(f"/api/harnesses/{r.e.id}?against={r.seed.id}").json()["diff"]
    assert diff["against"]["id"] == r.seed.id and not diff["is_parent"]
    assert client.get(f"/api/harnesses/{r.c.id}?against={r.c.id}").json()["diff"]["identical"]

    missing = client.get(f"/api/harnesses/{r.a.id}?against=9999")
    assert missing.status_code == 404
    assert missing.json()["detail"] == "Harness 9999 not found: there is nothing to compare against"


def test_seed_has_no_diff_and_full_shows_every_line(store, client):
    r = search_run(store)

    assert client.get(f"/api/harnesses/{r.seed.id}").json()["diff"] is None
    full = client.get(f"/api/harnesses/{r.a.id}?full=true").json()["diff"]
    assert len(full["hunks"]) == 1 and full["folded_after"] == 0
    assert len(full["hunks"][0]["rows"]) == len(r.a.code.splitlines())


def test_scores_matrix_has_a_row_per_checkpoint_and_a_column_per_split(store, client):
    r = search_run(store)

    def evaluation(checkpoint, split, **kw):
        return store.write(
            Evaluation(
                run_id=r.run.id,
                harness_id=r.c.id,
                checkpoint_id=checkpoint.id,
                split=split,
                n_tasks=8,
                **kw,
            )
        )

    evaluation(r.c1, "test", k=4, status="done", mean_at_k=0.30)
    newer = evaluation(r.c1, "test", k=4, status="done", mean_at_k=0.35)
    running = evaluation(r.c2, "train", k=1)  # sampling, not finished

    scores = client.get(f"/api/harnesses/{r.c.id}").json()["scores"]

    assert scores["splits"] == ["harness", "test", "train"]
    assert [row["checkpoint_id"] for row in scores["rows"]] == [r.c1.id, r.c2.id]
    c1, c2 = (row["cells"] for row in scores["rows"])
    assert c1["harness"]["mean_at_k"] == 0.60 and c2["harness"]["mean_at_k"] == 0.65
    assert c1["test"] == {
        **c1["test"],
        "mean_at_k": 0.35,
        "evaluation_id": newer.id,
        "n_evaluations": 2,
        "k": 4,
    }
    assert "test" not in c2
    assert c2["train"]["status"] == "running" and c2["train"]["evaluation_id"] == running.id
