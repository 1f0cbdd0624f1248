"""GET /api/harnesses/{id}: code, lineage neighbours, evaluations."""


def test_harness_has_code_parent_children_and_evaluations(store, client):
    run = store.run()
    parent = store.harness(run, name="seed.py", proposer="seed")
    child = store.harness(
        run,
        name="child.py",
        code="def run(task, llm, tools):\n    pass\n",
        parent_id=parent.id,
        proposer="knobs",
        hypothesis="vote 3 times",
    )
    grandchild = store.harness(run, name="grandchild.py", parent_id=child.id)
    evaluation = store.evaluation(run, child, store.checkpoint(), n_tasks=4, mean_at_k=0.75)

    data = client.get(f"/api/harnesses/{child.id}").json()

    assert data["harness"]["code"].startswith("def run(task, llm, tools):")
    assert data["harness"]["proposer"] == "knobs"
    assert data["harness"]["hypothesis"] == "vote 3 times"
    assert data["parent"]["id"] == parent.id
    assert [c["id"] for c in data["children"]] == [grandchild.id]
    assert [e["id"] for e in data["evaluations"]] == [evaluation.id]
    assert data["evaluations"][0]["mean_at_k"] == 0.75


def test_invalid_harness_shows_its_error(store, client):
    harness = store.harness(
        name="broken.py",
        code="def run(:",
        valid=False,
        error="SyntaxError: invalid syntax (line 1)",
    )

    data = client.get(f"/api/harnesses/{harness.id}").json()

    assert data["harness"]["valid"] is False
    assert data["harness"]["error"].startswith("SyntaxError")
    assert data["parent"] is None


def test_unknown_harness_is_404(client):
    response = client.get("/api/harnesses/77")
    assert response.status_code == 404
    assert response.json()["detail"] == "Harness 77 not found"
