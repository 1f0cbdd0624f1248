"""The run page of a harness search: iterations, candidates (invalid ones with their error),
the accepted harness, and the same data under /api/runs/{id}."""

from app.db.schema import Phase, SearchIteration


def test_run_page_shows_the_harness_phase(store, client):
    run = store.run(name="search seed.py")
    seed = store.harness(run, name="seed.py")
    ckpt = store.checkpoint()
    phase = store.write(
        Phase(
            run_id=run.id,
            kind="harness",
            round=1,
            harness_in_id=seed.id,
            checkpoint_in_id=ckpt.id,
            rollouts=40,
        )
    )
    good = store.harness(
        run,
        name="program",
        parent_id=seed.id,
        parent_ids=[seed.id],
        phase_id=phase.id,
        iteration=1,
        proposer="llm",
        axis="solver",
        hypothesis="let the model write the expression",
    )
    store.harness(
        run,
        name="syntax",
        parent_id=seed.id,
        phase_id=phase.id,
        iteration=1,
        proposer="llm",
        valid=False,
        error="syntax error: line 1: expected ':'",
    )
    for harness, success in ((seed, 0.05), (good, 0.55)):
        ev = store.evaluation(
            run,
            harness,
            ckpt,
            n_tasks=16,
            status="done",
            mean_at_k=success,
            mean_turns=1.0,
            n_done=16,
        )
        store.write_values(ev, split="harness", phase_id=phase.id)
    store.write(
        SearchIteration(
            run_id=run.id,
            phase_id=phase.id,
            iteration=0,
            proposer="incoming",
            best_success=0.05,
            accepted_harness_id=seed.id,
        ),
        SearchIteration(
            run_id=run.id,
            phase_id=phase.id,
            iteration=1,
            proposer="llm",
            n_candidates=2,
            n_valid=1,
            best_success=0.55,
            accepted_harness_id=good.id,
            prompt_tokens=1000,
            completion_tokens=200,
            cost_usd=0.006,
        ),
        SearchIteration(
            run_id=run.id,
            phase_id=phase.id,
            iteration=2,
            proposer="llm",
            status="failed",
            error="the proposer endpoint http://x/v1 failed",
        ),
    )
    store.write_values(phase, status="done", ended_reason="fixed", harness_out_id=good.id)

    page = client.get(f"/runs/{run.id}").text
    assert "Harness phase 1" in page and "ended: fixed" in page
    assert "syntax error: line 1: expected &#39;:&#39;" in page
    assert "the proposer endpoint http://x/v1 failed" in page
    assert "$0.0060" in page and "harness split: best success on the frontier" in page
    assert (
        f'href="/harnesses/{good.id}">{good.id} · program</a> <span class="badge status-accepted">'
        in page
    )

    (hp,) = client.get(f"/api/runs/{run.id}").json()["harness_phases"]
    assert [c["name"] for c in hp["candidates"]] == ["program", "syntax"]
    assert hp["candidates"][0]["success"] == 0.55 and hp["candidates"][0]["accepted"]
    assert hp["incoming"]["success"] == 0.05 and hp["proposer_cost_usd"] == 0.006
    assert [p["y"] for p in hp["best_success"]] == [0.05, 0.55]
