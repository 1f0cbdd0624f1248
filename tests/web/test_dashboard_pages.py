"""The runs list, several runs compared, and one loop run's dashboard: phase timeline, budgets,
event log, curves on a chosen x with a baseline, and the control buttons' form."""

import html
import re

import pytest

from app.db.schema import Event, Metric, Phase, Run

BUDGET = {"experiment": {"budget": {"rollouts": 100, "wall_s": 3600}, "test": {"k": 2}}}


def loop_run(store, name: str, status: str = "running", tests=((0, 0.1), (40, 0.5))) -> Run:
    """A loop run with a finished weight phase, a running harness phase and test points."""
    run = store.write(
        Run(
            name=name,
            kind="experiment",
            domain="arith",
            status=status,
            strategy="whale",
            desired="running",
            config=BUDGET,
        )
    )
    store.write(
        Phase(
            run_id=run.id, kind="weight", round=1, status="done", ended_reason="fixed", rollouts=32
        ),
        Phase(run_id=run.id, kind="harness", round=1, status="running"),
        *[
            Metric(
                run_id=run.id,
                series="test/mean@k",
                x=i,
                rollouts=rollouts,
                y=y,
                weight_steps=i,
                wall_s=60.0 * i,
            )
            for i, (rollouts, y) in enumerate(tests)
        ],
        Event(run_id=run.id, kind="run_start", detail={"strategy": "whale"}),
        Event(
            run_id=run.id,
            kind="phase_end",
            detail={"kind": "weight", "round": 1, "reason": "fixed"},
        ),
    )
    return run


def csrf_token(client) -> str:
    return client.get("/api/csrf").json()["csrf_token"]


def test_runs_list_shows_strategy_phase_best_test_and_budget_left(store, client):
    run = loop_run(store, "whale-a")
    harness, checkpoint = store.harness(run), store.checkpoint()
    store.evaluation(run, harness, checkpoint, n_tasks=4, status="done", mean_at_k=0.5)
    # the rollouts the budget counts: the sampling's 40, not the test evaluation's 4
    store.evaluation(run, harness, checkpoint, n_tasks=40, split="train", status="done", n_done=40)
    row = next(r for r in client.get("/api/runs").json()["runs"] if r["id"] == run.id)
    assert row["strategy"] == "whale" and row["phase"] == "harness phase 1"
    assert row["best_test"] == 0.5 and row["rollouts_used"] == 40 and row["rollouts_left"] == 60

    page = client.get("/runs").text
    assert f'name="ids" value="{run.id}"' in page  # a checkbox to pick it for comparing
    assert "harness phase 1" in page and "0.500" in page
    assert "arith-quick.toml" in page  # the shipped experiments offered when starting a run


def test_compare_overlays_every_picked_run_on_one_chart(store, client):
    runs = [
        loop_run(store, f"run-{i}", status="done", tests=((0, 0.1), (50 + i, i / 10)))
        for i in range(10)
    ]
    ids = "&".join(f"ids={r.id}" for r in runs)
    page = client.get(f"/runs/compare?{ids}").text
    assert page.count('class="chart-line" points=') == 10  # one curve per run
    for run in runs:  # each run in the legend and the table
        assert f"#{run.id} whale: {run.name}" in page and f'href="/runs/{run.id}"' in page
    data = client.get(f"/api/runs/compare?{ids}&x=wall_s").json()
    assert data["x"] == "wall_s" and [r["id"] for r in data["runs"]] == [r.id for r in runs]
    assert data["curves"][f"#{runs[3].id} whale: run-3"] == [
        {"x": 0.0, "y": 0.1, "low": None, "high": None},  # synthetic: no rollouts to resample
        {"x": 60.0, "y": 0.3, "low": None, "high": None},
    ]


def test_compare_refuses_nothing_too_many_and_unknown_runs(store, client):
    run = loop_run(store, "only")
    nothing = client.get("/runs/compare")
    assert nothing.status_code == 422 and "pick at least one run" in nothing.text
    many = "&".join(f"ids={run.id}" for _ in range(31))
    assert "at most 30 runs" in client.get(f"/api/runs/compare?{many}").json()["detail"]
    eleven = "&".join(f"ids={loop_run(store, f'run-{i}').id}" for i in range(11))
    refused = client.get(f"/api/runs/compare?{eleven}").json()["detail"]
    assert "at most 10 curves" in refused and "not 11" in refused
    unknown = client.get(f"/runs/compare?ids={run.id}&ids=999")
    assert unknown.status_code == 404 and "no run 999" in unknown.text
    assert client.get(f"/runs/compare?ids={run.id}&x=tokens").status_code == 422


def test_dashboard_shows_timeline_budgets_log_and_the_actions_the_run_takes(store, client):
    run = loop_run(store, "live")
    d = client.get(f"/api/runs/{run.id}").json()["dashboard"]
    assert [(p["kind"], p["round"], p["ended_reason"]) for p in d["timeline"]] == [
        ("weight", 1, "fixed"),
        ("harness", 1, None),
    ]
    budgets = {b["name"]: b for b in d["budgets"]}
    assert budgets["rollouts"]["limit"] == 100 and budgets["tokens"]["limit"] is None
    assert [e["text"] for e in d["events"]] == [
        "weight phase 1 ended: fixed",
        "run started (whale)",
    ]
    refused = {(c["action"], c["kind"]): c["refused"] for c in d["controls"]}
    assert refused[("pause", None)] is None and refused[("resume", None)] == "the run is not paused"
    assert d["run"]["live"] is True

    page = client.get(f"/runs/{run.id}").text
    assert 'id="timeline"' in page and "W1" in page and "H1" in page
    assert re.search(
        r'class="control control-resume"[^>]*disabled title="the run is not paused"', page
    )
    assert f'hx-get="/runs/{run.id}/live?x=rollouts"' in page  # it keeps polling while live


def test_the_x_switch_and_the_baseline_redraw_the_test_curve(store, client):
    run, baseline = loop_run(store, "run"), loop_run(store, "base", status="done")
    by_steps = client.get(f"/api/runs/{run.id}?x=weight_steps&baseline={baseline.id}").json()[
        "dashboard"
    ]
    plain = {"low": None, "high": None}  # these points plot no stored evaluation
    assert by_steps["curves"]["test"] == {
        f"#{run.id} whale: run": [{"x": 0, "y": 0.1, **plain}, {"x": 1, "y": 0.5, **plain}],
        f"#{baseline.id} whale: base": [{"x": 0, "y": 0.1, **plain}, {"x": 1, "y": 0.5, **plain}],
    }
    page = client.get(f"/runs/{run.id}?x=wall_s&baseline={baseline.id}").text
    assert "test mean@k vs baseline" in page and "wall-clock time (s)" in page
    assert page.count('class="chart-line" points=') >= 2
    assert client.get(f"/runs/{run.id}?baseline=999").status_code == 404


def test_control_buttons_pause_and_report_refusals(store, client, workbench):
    run = loop_run(store, "steer")
    headers = {"X-CSRF-Token": csrf_token(client), "HX-Request": "true"}
    paused = client.post(
        f"/runs/{run.id}/control",
        headers=headers,
        data={"action": "pause", "reason": "look at traces"},
    )
    assert paused.status_code == 200 and "pause: asked" in paused.text
    assert "pause asked from ui: look at traces" in paused.text  # the fresh event log
    with workbench.session() as s:
        assert s.get(Run, run.id).desired == "paused"

    refused = client.post(
        f"/runs/{run.id}/control", headers=headers, data={"action": "force", "kind": "sideways"}
    )
    assert "force sideways refused: force needs kind = weight or harness" in refused.text
    with workbench.session() as s:
        assert s.get(Run, run.id).command is None  # nothing changed
    no_csrf = client.post(f"/runs/{run.id}/control", data={"action": "stop"})
    assert no_csrf.status_code == 403
    with workbench.session() as s:
        assert s.get(Run, run.id).desired == "paused"


def test_best_test_is_the_test_split_figure_with_its_interval(store, client):
    run = store.run(name="searched")
    harness, checkpoint = store.harness(run), store.checkpoint()
    done = {"status": "done", "n_done": 1}
    store.evaluation(run, harness, checkpoint, 8, mean_at_k=0.5, ci_low=0.25, ci_high=0.75, **done)
    store.evaluation(run, harness, checkpoint, 8, mean_at_k=0.25, **done)
    # a one-task smoke check and a harness-split score are no result to show
    unscored = store.run(name="unscored")
    for owner, split in ((run, "smoke"), (run, "harness"), (unscored, "smoke")):
        other = store.evaluation(owner, harness, checkpoint, 1, mean_at_k=1.0, **done)
        store.write_values(other, split=split)

    rows = {r["id"]: r for r in client.get("/api/runs").json()["runs"]}
    assert rows[run.id]["best_test"] == 0.5 and rows[run.id]["best_test_ci"] == [0.25, 0.75]
    assert rows[unscored.id]["best_test"] is None

    page = client.get("/runs").text
    table = page[page.index('<table id="runs">') : page.index("</table>")]
    assert ">best test mean@k</th>" in table and "best mean@k" not in table
    row = re.search(rf'<tr>\s*<td><input[^>]*value="{run.id}".*?</tr>', table, re.S).group(0)
    assert "0.500" in row and "[0.250, 0.750]" in row and "1.000" not in row
    row = re.search(rf'<tr>\s*<td><input[^>]*value="{unscored.id}".*?</tr>', table, re.S).group(0)
    assert "1.000" not in row


@pytest.mark.parametrize(
    "text, error",
    [
        ("", "the experiment is empty"),
        (" \n", "the experiment is empty"),
        ('name = "x"\nstrategy = [', "not valid TOML"),
        ('strategy = "whale"\n', "name: Field required"),
    ],
)
def test_a_refused_experiment_is_shown_inside_the_form(client, text, error):
    response = client.post(
        "/runs",
        headers={"X-CSRF-Token": csrf_token(client), "HX-Request": "true"},
        data={"experiment": text},
    )
    # htmx swaps a 422 in place of #start-run (base.html's htmx-config): the form again, not
    # JSON and not a whole page
    assert '{"code": "422", "swap": true' in client.get("/runs").text
    assert response.status_code == 422
    assert response.headers["content-type"].startswith("text/html")
    fragment = response.text.strip()
    assert (
        fragment.startswith('<details class="start-run" id="start-run"') and "<html" not in fragment
    )
    form = fragment[fragment.index("<form") : fragment.index("</form>")]
    assert 'hx-post="/runs"' in form and 'name="experiment"' in form  # to fix and post again
    shown = html.unescape(re.search(r'id="start-error">(.*?)</pre>', form, re.S).group(1))
    assert error in shown
    assert client.get("/api/runs").json()["runs"] == []  # nothing started


def test_a_refused_experiment_comes_back_with_its_text_and_error(client):
    text = 'name = "x"\n[budget]\nrollout = 5\n'
    response = client.post(
        "/runs", headers={"X-CSRF-Token": csrf_token(client)}, data={"experiment": text}
    )
    assert response.status_code == 422
    assert "budget.rollout: Extra inputs are not permitted" in response.text
    assert "rollout = 5" in response.text  # the text is kept for fixing
    assert client.get("/api/runs").json()["runs"] == []  # nothing started


def test_rft_at_temperature_zero_is_flagged_on_the_run_page(store, client):
    rft = {"temperature": 0.0, "samples_per_prompt": 8}
    greedy, fine = (
        store.write(
            Run(
                name=name,
                kind="experiment",
                domain="arith",
                status="running",
                strategy="whale",
                config={"experiment": {**BUDGET["experiment"], "rft": rft}},
            )
        )
        for name, rft in (("greedy", rft), ("fine", {**rft, "temperature": 1.0}))
    )
    (warning,) = client.get(f"/api/runs/{greedy.id}").json()["dashboard"]["warnings"]
    assert "temperature 0" in warning and "8 samples" in warning
    assert warning in client.get(f"/runs/{greedy.id}").text
    assert client.get(f"/api/runs/{fine.id}").json()["dashboard"]["warnings"] == []


def test_compare_says_when_runs_were_scored_by_different_modes(store, client):
    checkpoint = store.checkpoint()
    runs = []
    for name, scoring in (("strict", "paper"), ("loose", "lenient"), ("loose-too", "lenient")):
        run = loop_run(store, name, status="done")
        harness = store.harness(run)
        store.evaluation(run, harness, checkpoint, 4, k=2, scoring=scoring, status="done")
        runs.append(run)
    same = client.get(f"/api/runs/compare?ids={runs[1].id}&ids={runs[2].id}").json()
    assert same["notes"] == [] and [r["scoring"] for r in same["runs"]] == ["lenient"] * 2
    ids = "&".join(f"ids={r.id}" for r in runs)
    mixed = client.get(f"/api/runs/compare?{ids}").json()
    (note,) = mixed["notes"]
    assert note == (
        f"these runs were scored by different scoring modes: run {runs[0].id} paper; "
        f"runs {runs[1].id}, {runs[2].id} lenient; their curves are not on one scale "
        "(the verifiers differ)"
    )
    page = client.get(f"/runs/compare?{ids}").text
    notes = page[page.index('<div id="scale-notes" role="alert">') :]
    assert html.unescape(notes[: notes.index("</div>")]).count(note) == 1
    assert page.index('id="scale-notes"') < page.index('<svg class="chart"')  # above the chart
    assert page.count('<td class="differs">lenient</td>') == 2  # the column that differs


def test_compare_says_when_runs_measure_mean_at_k_with_different_k(store, client):
    checkpoint = store.checkpoint()
    runs = []
    for name, k in (("four", 4), ("two", 2)):
        run = loop_run(store, name, status="done")
        store.evaluation(run, store.harness(run), checkpoint, 4, k=k, scoring="lenient")
        runs.append(run)
    ids = f"ids={runs[0].id}&ids={runs[1].id}"
    data = client.get(f"/api/runs/compare?{ids}").json()
    assert [r["k"] for r in data["runs"]] == [4, 2]  # as its test evaluations measured it
    assert data["notes"] == [
        f"these runs measure mean@k with different k: run {runs[0].id} k=4; run {runs[1].id} "
        "k=2; their curves are not on one scale (a mean over more samples is another number)"
    ]
    page = html.unescape(client.get(f"/runs/compare?{ids}").text)
    assert data["notes"][0] in page and page.count('<td class="num differs">') == 2


def test_a_baseline_on_another_domain_is_named_on_the_run_page(store, client):
    run = loop_run(store, "arith")
    other = store.write(
        Run(name="math", kind="experiment", domain="math", status="done", strategy="whale")
    )
    warnings = client.get(f"/api/runs/{run.id}?baseline={other.id}").json()["dashboard"]["warnings"]
    assert warnings == [
        f"these runs test different domains: run {run.id} arith; run {other.id} math; "
        "their curves are not on one scale (their tasks differ)"
    ]
    assert warnings[0] in html.unescape(client.get(f"/runs/{run.id}?baseline={other.id}").text)
    assert client.get(f"/api/runs/{run.id}").json()["dashboard"]["warnings"] == []


def test_the_start_form_shows_that_it_is_starting_while_it_waits(client):
    """While the request is pending the form says what happens (htmx shows the indicator and
    disables the button for that time), and that the model loads once the run's page opens."""
    page = client.get("/runs").text
    start = page.index('<form hx-post="/runs"')
    form = page[start : page.index("</form>", start)]
    assert 'hx-indicator="#starting"' in form and 'hx-disabled-elt="find button"' in form
    shown = re.search(
        r'<span id="starting" class="htmx-indicator[^"]*"[^>]*>(.*?)</span>', form, re.S
    )
    assert shown and "the run's page opens" in shown.group(1) and "model loads" in shown.group(1)


def test_a_test_point_opens_what_it_measured_and_says_what_went_wrong(store, client):
    """A point of the test curve links to its evaluation's rollouts; its tooltip names the
    harness, checkpoint, k and split, and counts the rollouts that scored nothing."""
    run = loop_run(store, "clicked", tests=())
    harness, checkpoint = store.harness(run), store.checkpoint()
    evaluation = store.evaluation(
        run, harness, checkpoint, n_tasks=4, status="done", n_done=4, mean_at_k=0.25
    )
    store.write_values(evaluation, ci_low=0.0, ci_high=0.75)
    store.rollouts(evaluation, ["pass", "timeout", "error", "fail"])
    store.write(
        Metric(
            run_id=run.id,
            series="test/mean@k",
            x=0,
            rollouts=0,
            y=0.25,
            evaluation_id=evaluation.id,
        )
    )
    (point,) = client.get(f"/api/runs/{run.id}").json()["dashboard"]["curves"]["test"][
        f"#{run.id} whale: clicked"
    ]
    assert point == {
        "x": 0,
        "y": 0.25,
        "low": 0.0,
        "high": 0.75,
        "evaluation_id": evaluation.id,
        "harness_id": harness.id,
        "checkpoint_id": checkpoint.id,
        "k": 1,
        "split": "test",
        "n_timeout": 1,
        "n_error": 1,
        "n_infra": 0,
        "n_tasks": 4,
        "few_tasks": True,  # under 30 tasks: the chart's title says so
    }
    page = client.get(f"/runs/{run.id}").text
    link = re.search(
        r'<a class="chart-point" href="([^"]+)"><circle[^>]*><title>([^<]*)</title>', page
    )
    assert link and link.group(1) == f"/rollouts?evaluation={evaluation.id}"
    tooltip = html.unescape(link.group(2))
    assert f"harness {harness.id}, checkpoint {checkpoint.id}, k=1, test split" in tooltip
    assert "rollouts that scored nothing: 1 timeout, 1 error" in tooltip
    listed = client.get(f"/rollouts?evaluation={evaluation.id}")
    assert listed.status_code == 200 and listed.text.count('href="/rollouts/') >= 4


def test_a_refused_start_keeps_the_preset_picked_and_says_no_ui_prefix(client):
    """The preset picked goes along with the text: a refused start shows it picked still (the
    text as sent, edited or not), and the error as the key it names, not "ui: ...": the form
    is no file to name."""
    broken = 'name = "x"\n[budget]\nrollout = 5\n'
    response = client.post(
        "/runs",
        headers={"X-CSRF-Token": csrf_token(client), "HX-Request": "true"},
        data={"experiment": broken, "preset": "arith-whale.toml"},
    )
    assert response.status_code == 422
    menu = re.search(r'<select id="preset" name="preset".*?</select>', response.text, re.S)
    picked = re.findall(r'<option value="([^"]*)" selected>', menu.group(0))
    assert picked == ["arith-whale.toml"]
    # the text is no longer the file's: the menu says so rather than name it as is
    assert '<option value="arith-whale.toml" selected>experiments/arith-whale.toml (edited)<' in (
        menu.group(0)
    )
    assert "toml (edited)<" not in client.get("/runs").text  # a fresh form: the file's own text
    shown = html.unescape(re.search(r'id="start-error">(.*?)</pre>', response.text, re.S).group(1))
    assert shown.startswith("budget.rollout: Extra inputs are not permitted"), shown
    fresh = client.get("/api/runs").json()
    assert fresh["preset"] == "arith-quick.toml" and fresh["error"] is None
