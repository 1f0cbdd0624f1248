"""The trace browser's pages: the filtered list with its form, the long trace in windows, two
traces side by side, and "fails under A, passes under B"."""

import re

import pytest

from app.db.schema import Phase
from tests.api.test_contrast import write as write_outcomes
from tests.api.test_trace import long_trace


def amp(url: str) -> str:
    """A URL as it appears in an href attribute."""
    return url.replace("&", "&amp;")


@pytest.fixture
def two_harnesses(store):
    run = store.run()
    checkpoint = store.checkpoint()
    first, second = store.harness(run, name="first.py"), store.harness(run, name="second.py")
    failing, other_task = store.rollouts(
        store.evaluation(run, first, checkpoint, 2), ["fail", "fail"]
    )
    [passing] = store.rollouts(store.evaluation(run, second, checkpoint, 1), ["pass"])
    return run, first, second, failing, passing, other_task


def test_filter_form_and_chips_keep_every_filter(client, two_harnesses):
    run, first, *_ = two_harnesses

    page = client.get(f"/rollouts?run={run.id}&harness={first.id}&q=nope&task=test-1").text

    form = page[page.index('<form class="form-row filters"') : page.index("</form>")]
    assert 'method="get" action="/rollouts"' in form
    assert 'name="q" value="nope"' in form and 'name="task" value="test-1"' in form
    harness = form[form.index('<select name="harness"') : form.index("</select>")]
    assert f'<option value="{first.id}" selected>first.py</option>' in harness  # by name
    assert f'name="run" min="0" value="{run.id}"' in form
    # a status chip keeps the other filters (and drops any page cursor)
    failed_chip = f"/rollouts?run={run.id}&harness={first.id}&task=test-1&q=nope&status=failed"
    assert f'href="{amp(failed_chip)}"' in page
    assert "first.py" in page  # the title names the harness
    # the contrast form starts from the harness filtered on
    contrast = page[page.index('action="/rollouts/contrast"') :]
    a_harness = contrast[contrast.index('<select name="a_harness"') :]
    assert f'<option value="{first.id}" selected>first.py</option>' in a_harness[:2000]


def test_status_chips_keep_their_counts_under_a_harness_filter(client, two_harnesses):
    run, first, second, *_ = two_harnesses
    page = client.get(f"/rollouts?run={run.id}&harness=first.py").text
    chips = page[page.index('<p class="chips">') : page.index("</p>", page.index('"chips"'))]
    text = " ".join(re.sub(r"<[^>]+>", " ", chips).split())
    assert text.startswith("all 2 ") and "failed 2" in text and "pass 0" in text
    page = client.get(f"/rollouts?run={run.id}&harness={second.id}").text
    chips = page[page.index('<p class="chips">') : page.index("</p>", page.index('"chips"'))]
    assert "all <b>1</b>" in chips and "pass <b>1</b>" in chips


def test_blank_form_submission_lists_everything(client, two_harnesses):
    page = client.get("/rollouts?q=&task=&harness=&checkpoint=&phase=&run=&evaluation=")
    assert page.status_code == 200
    assert page.text.count('href="/rollouts/') == 3


def test_a_short_search_page_says_how_far_it_searched(client, store, monkeypatch):
    from app.read import rollouts as rollouts_module

    monkeypatch.setattr(rollouts_module, "SEARCH_ROWS", 4)
    run = store.run()
    rollouts = store.rollouts(
        store.evaluation(run, store.harness(run), store.checkpoint(), 10), ["fail"] * 10
    )

    page = client.get("/rollouts?q=nope").text

    note = re.sub(
        r"\s+",
        " ",
        page[page.index('id="search-note"') : page.index("</p>", page.index('id="search-note"'))],
    )
    assert f"Searched 4 rollouts up to id {rollouts[3].id} and found 4" in note
    assert f'href="/rollouts?q=nope&amp;after={rollouts[3].id}">continue searching' in note


def test_pager_links_first_previous_next_and_last(client, store):
    run = store.run()
    rollouts = store.rollouts(
        store.evaluation(run, store.harness(run), store.checkpoint(), 120), ["pass"] * 120
    )

    middle = client.get(f"/rollouts?run={run.id}&after={rollouts[49].id}").text

    assert f'href="/rollouts?run={run.id}">&laquo; first' in middle
    assert f'href="/rollouts?run={run.id}&amp;before={rollouts[50].id}" rel="prev"' in middle
    assert f'href="/rollouts?run={run.id}&amp;after={rollouts[99].id}" rel="next"' in middle
    assert f'href="/rollouts?run={run.id}&amp;before={2**63 - 1}">last' in middle
    last = client.get(f"/rollouts?run={run.id}&before={2**63 - 1}").text
    assert last.count('href="/rollouts/') == 50 and f'href="/rollouts/{rollouts[119].id}"' in last
    assert 'rel="next"' not in last and 'rel="prev"' in last


def test_long_trace_shows_its_first_and_last_steps_and_links_the_rest(store, client, two_harnesses):
    rollout = two_harnesses[3]
    long_trace(store, rollout, 120)

    page = client.get(f"/rollouts/{rollout.id}").text

    shown = [int(i) for i in re.findall(r'<article class="step[^"]*" id="step-(\d+)"', page)]
    assert shown == list(range(20)) + list(range(115, 120))
    gap = re.sub(
        r"\s+",
        " ",
        page[page.index('class="step-gap"') : page.index("</p>", page.index('class="step-gap"'))],
    )
    assert "95 steps (20&ndash;114) not shown" in gap
    assert f'href="/rollouts/{rollout.id}?steps=20-69#step-20"' in gap
    assert f'href="/rollouts/{rollout.id}?steps=65-114#step-65"' in gap
    assert page.count("<details open>") == 25  # each step folds on a click


def test_a_window_of_a_long_trace_folds_what_came_before_it(store, client, two_harnesses):
    rollout = two_harnesses[3]
    long_trace(store, rollout, 120)

    page = client.get(f"/rollouts/{rollout.id}?steps=20-69").text

    shown = [int(i) for i in re.findall(r'<article class="step[^"]*" id="step-(\d+)"', page)]
    assert shown == list(range(20, 70))
    assert "20 steps (0&ndash;19) not shown" in page and "50 steps (70&ndash;119) not shown" in page
    step_20 = page[page.index('id="step-20"') : page.index('id="step-21"')]
    # step 20 resends the 21 messages of the calls before it: folded, only its new one shown
    assert "20 earlier messages, as in the previous call" in step_20
    assert "go on after 18" in step_20
    assert f'href="/rollouts/{rollout.id}#steps">first and last steps' in page
    assert client.get(f"/rollouts/{rollout.id}?steps=70-20").status_code == 422


def test_trace_page_offers_the_same_task_elsewhere_to_compare(client, two_harnesses):
    _, _, second, failing, passing, other_task = two_harnesses

    page = client.get(f"/rollouts/{failing.id}").text

    assert f'href="/rollouts/compare?a={failing.id}&amp;b={passing.id}"' in page
    assert "second.py" in page
    assert f'href="/rollouts/compare?a={failing.id}&amp;b={other_task.id}"' not in page
    assert 'href="/rollouts?task=test-0"' in page


def test_compare_page_shows_both_traces_side_by_side(store, client, two_harnesses):
    _, first, second, failing, passing, _ = two_harnesses
    store.model_step(failing, 0, [{"role": "user", "content": "What is 0 + 1?"}], "It is 7.")
    store.model_step(passing, 0, [{"role": "user", "content": "What is 0 + 1?"}], "It is 1.")

    page = client.get(f"/rollouts/compare?a={failing.id}&b={passing.id}").text

    left = page[page.index('id="side-1"') : page.index('id="side-2"')]
    right = page[page.index('id="side-2"') :]
    assert f'href="/rollouts/{failing.id}"' in left and "first.py" in left and "It is 7." in left
    assert (
        f'href="/rollouts/{passing.id}"' in right and "second.py" in right and "It is 1." in right
    )
    assert 'class="badge status-fail"' in left and 'class="badge status-pass"' in right
    assert "task-mismatch" not in page
    assert f'href="/rollouts/compare?a={passing.id}&amp;b={failing.id}"' in page  # swap sides


def test_compare_page_warns_when_the_tasks_differ(client, two_harnesses):
    failing, other_task = two_harnesses[3], two_harnesses[5]

    page = client.get(f"/rollouts/compare?a={failing.id}&b={other_task.id}").text

    warning = page[
        page.index('id="task-mismatch"') : page.index("</p>", page.index('id="task-mismatch"'))
    ]
    assert "Different tasks" in warning and "test-0" in warning and "test-1" in warning


def test_contrast_page_lists_tasks_with_a_trace_of_each_side(store, client):
    run = store.run()
    a, b = store.harness(run, name="a.py"), store.harness(run, name="b.py")
    checkpoint = store.checkpoint()
    under_a = write_outcomes(store, store.evaluation(run, a, checkpoint, n_tasks=9), 0)
    under_b = write_outcomes(store, store.evaluation(run, b, checkpoint, n_tasks=9), 1)

    empty = client.get("/rollouts/contrast").text
    page = client.get(f"/rollouts/contrast?a_harness={a.id}&b_harness={b.id}&run=").text

    assert 'id="contrast-form"' in empty and 'id="contrast"' not in empty
    rows = page[page.index('<table id="contrast">') : page.index("</table>")]
    assert re.findall(r'href="/rollouts\?task=(t\d)"', rows) == ["t0", "t3"]
    failing_t0 = under_a["t0"][0].id
    passing_t0 = next(r.id for r in under_b["t0"] if r.status == "pass")
    assert f'href="/rollouts/compare?a={failing_t0}&amp;b={passing_t0}"' in rows
    assert "<b>2</b> tasks fail under A" in page
    refused = client.get(f"/rollouts/contrast?a_harness={a.id}")
    assert refused.status_code == 422 and "b_harness or b_checkpoint" in refused.text


def test_reasoning_is_folded_and_tool_calls_and_results_are_shown(store, client, two_harnesses):
    from app.db.schema import Step

    rollout = two_harnesses[3]
    call = {"id": "c1", "type": "function", "function": {"name": "search", "arguments": "{}"}}
    store.write(
        Step(
            rollout_id=rollout.id,
            idx=0,
            kind="model",
            request={"messages": [{"role": "user", "content": "Who?"}]},
            response={
                "message": {"content": "", "reasoning_content": "look it up", "tool_calls": [call]},
                "finish_reason": "tool_calls",
            },
        ),
        Step(
            rollout_id=rollout.id,
            idx=1,
            kind="model",
            request={
                "messages": [
                    {"role": "user", "content": "Who?"},
                    {"role": "assistant", "content": "", "tool_calls": [call]},
                    {"role": "tool", "tool_call_id": "c1", "content": "Ada Lovelace"},
                ]
            },
            response={
                "message": {"content": "<think>\nit was Ada\n</think>\n\nAda Lovelace"},
                "finish_reason": "stop",
            },
        ),
    )
    page = client.get(f"/rollouts/{rollout.id}").text
    folded = re.findall(r'<details class="reasoning"><summary>reasoning, (\d+) characters', page)
    assert folded == ["10", "10"]  # the parser's field, and <think> left in the text
    assert '<pre class="reasoning-text">look it up</pre>' in page
    assert '<pre class="reasoning-text">it was Ada</pre>' in page
    assert "&lt;think&gt;" not in page  # folded, not shown twice
    calls = re.findall(r'<pre class="tool-calls">(.*?)</pre>', page, re.S)
    assert calls and all("search" in c for c in calls)  # the call, where made and where resent
    assert '<span class="role">tool</span>' in page and "Ada Lovelace" in page  # its result


def test_an_infrastructure_failure_is_shown_as_such_and_left_out_of_the_score(store, client):
    run, checkpoint = store.run(), store.checkpoint()
    harness = store.harness(run, name="h.py")
    evaluation = store.evaluation(run, harness, checkpoint, 2, mean_at_k=1.0, n_infra=1)
    passed, lost = store.rollouts(evaluation, ["pass", "infra"])
    store.write_values(passed, harness_s=0.12, model_wait_s=41.5, attempts=1)
    store.write_values(lost, harness_s=0.0, model_wait_s=600.0, attempts=3)

    page = client.get(f"/rollouts/{passed.id}").text
    assert "0.12 s harness + 41.50 s waiting on model and tools" in page
    assert "tries" not in page
    lost_page = client.get(f"/rollouts/{lost.id}").text
    assert "status-infra" in lost_page and "earlier tries failed on the infrastructure" in lost_page
    listing = client.get(f"/rollouts?evaluation={evaluation.id}").text
    assert "status=infra" in listing  # its chip, shown since there is one
    run_page = client.get(f"/runs/{run.id}").text
    assert "1 infra left out" in run_page


def _rows(page: str) -> list[str]:
    """The rows of the page's rollout table."""
    body = re.search(r"<tbody>(.*?)</tbody>", page, re.S).group(1)
    return re.findall(r"<tr>.*?</tr>", body, re.S)


def test_rollout_list_says_which_harness_checkpoint_and_split(store, client, two_harnesses):
    run, first, second, failing, passing, _ = two_harnesses

    page = client.get(f"/rollouts?run={run.id}").text

    head = re.search(r"<thead>.*?</thead>", page, re.S).group(0)
    assert "<th>harness</th><th>checkpoint</th><th>split</th>" in head
    rows = {int(re.search(r'href="/rollouts/(\d+)"', r).group(1)): r for r in _rows(page)}
    for rollout, harness in ((failing, first), (passing, second)):
        assert f'<a href="/harnesses/{harness.id}">{harness.name}</a>' in rows[rollout.id]
        assert f'href="/checkpoints/{rollout.checkpoint_id}">smol-base</a>' in rows[rollout.id]
        assert "<td>test</td>" in rows[rollout.id]
    # the filters still narrow the list, columns and all
    narrowed = _rows(client.get(f"/rollouts?run={run.id}&harness={second.id}").text)
    assert len(narrowed) == 1 and f'href="/rollouts/{passing.id}"' in narrowed[0]
    assert "second.py" in narrowed[0]
    item = client.get(f"/api/rollouts?harness={second.id}").json()["items"][0]
    assert (item["harness_name"], item["checkpoint_name"], item["split"]) == (
        "second.py",
        "smol-base",
        "test",
    )


def test_rollout_page_names_its_phase_by_the_runs_numbering(store, client):
    other = store.run(name="earlier")
    store.write(*[Phase(run_id=other.id, kind="weight", round=r) for r in (1, 2, 3)])
    run, checkpoint = store.run(name="loop"), store.checkpoint()
    store.write(Phase(run_id=run.id, kind="harness", round=1))
    phase = store.write(Phase(run_id=run.id, kind="harness", round=2))
    assert phase.id != 2  # the store's id is not the run's numbering
    harness = store.harness(run)
    evaluation = store.evaluation(run, harness, checkpoint, 1, phase_id=phase.id)
    [rollout] = store.rollouts(evaluation, ["fail"])

    page = client.get(f"/rollouts/{rollout.id}").text
    facts = re.search(r"<dt>evaluation</dt><dd>(.*?)</dd>", page, re.S).group(1)
    assert re.search(rf'href="/rollouts\?phase={phase.id}"[^>]*>harness phase 2</a>', facts)
    assert f"phase {phase.id}<" not in facts
    listing = client.get(f"/rollouts?phase={phase.id}").text
    assert "of harness phase 2" in listing and f"phase {phase.id}<" not in listing
    # the phase is picked by its name in the form; the list is the run's, so no run is named
    assert f'<option value="{phase.id}" selected>harness phase 2</option>' in listing


def test_a_failure_with_no_answer_and_no_output_says_so(store, client):
    run, checkpoint = store.run(), store.checkpoint()
    evaluation = store.evaluation(run, store.harness(run), checkpoint, 2)
    silent, wrong = store.rollouts(evaluation, ["fail", "fail"])
    store.write_values(silent, answer=None, reason=None, error=None, stdout_tail=None)

    page = client.get(f"/rollouts/{silent.id}").text
    note = re.search(r'<p class="warning no-answer"[^>]*>(.*?)</p>', page, re.S).group(1)
    note = " ".join(re.sub(r"<[^>]+>", "", note).split())
    assert note == (
        "No answer: the harness's run returned None without raising an error and printed "
        "nothing, so the verifier had nothing to score."
    )
    assert "no-answer" not in client.get(f"/rollouts/{wrong.id}").text  # it answered "nope"
    side_by_side = client.get(f"/rollouts/compare?a={silent.id}&b={wrong.id}").text
    assert side_by_side.count("no-answer") == 1


def test_the_trace_page_gives_the_harness_account_of_its_answer_or_says_it_gave_none(store, client):
    run = store.run()
    evaluation = store.evaluation(run, store.harness(run), store.checkpoint(), 2)
    quiet, talking = store.rollouts(evaluation, ["fail", "pass"])
    store.write_values(quiet, answer="0.0555")
    store.model_step(quiet, 0, [{"role": "user", "content": "q"}], "1 / 18")
    store.write_values(talking, answer="2", stdout_tail="parsed '1 + 1' -> 2\nvoted 2 of 3\n")
    store.model_step(talking, 0, [{"role": "user", "content": "q"}], "It is 2.")

    account = client.get(f"/api/rollouts/{quiet.id}").json()["account"]
    assert account == {"printed": [], "n_printed": 0, "model_calls": 1, "answer_in_steps": []}
    page = client.get(f"/rollouts/{quiet.id}").text
    section = page[page.index('<section id="account">') : page.index("</section>")]
    assert 'id="no-account"' in section and "gave no account" in section
    assert "appears as written in none of its 1 model call:" in section

    account = client.get(f"/api/rollouts/{talking.id}").json()["account"]
    assert account["printed"] == ["parsed '1 + 1' -> 2", "voted 2 of 3"]
    assert account["answer_in_steps"] == [0]
    page = client.get(f"/rollouts/{talking.id}").text
    section = page[page.index('<section id="account">') : page.index("</section>")]
    assert "In its own words" in section and "parsed &#39;1 + 1&#39; -&gt; 2" in section
    assert 'href="#step-0">step #0</a>' in section and "no-account" not in section
