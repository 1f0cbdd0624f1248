"""The harness page /harnesses/{id}: the side-by-side diff against the parent or a picked
harness, the proposer's notes, scores per checkpoint and split, and the links to rollouts."""

import html
import re

from app.db.schema import Evaluation
from app.read.diff import side_by_side
from tests.api.synthetic_lineage import search_run


def _rows(page: str, tag: str) -> list[str]:
    """The text of the diff rows of one kind (equal, replace, insert, delete), tags stripped."""
    rows = re.findall(rf'<tr class="diff-{tag}">(.*?)</tr>', page, re.S)
    return [
        html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", row))).strip() for row in rows
    ]


def test_diff_against_the_parent_marks_changed_lines_and_folds_the_rest(store, client):
    r = search_run(store)

    page = client.get(f"/harnesses/{r.a.id}").text

    assert "Diff against its parent" in page and f'href="/harnesses/{r.seed.id}">' in page
    # the changed line, old on the left, new on the right, the changed word marked
    assert _rows(page, "replace")[0] == '3 SOLVER = " direct " 3 SOLVER = " program "'
    assert "<mark>direct</mark>" in page and "<mark>program</mark>" in page
    assert _rows(page, "insert") == ["25 return str(eval(expression, {})) # the harness computes"]
    # the untouched prompt and parse functions are folded into one row
    fold = re.search(r'<tr class="diff-fold">(.*?)</tr>', page, re.S).group(1)
    assert "14 unchanged lines" in fold and "old 7&ndash;20" in fold
    assert "def parse(text):" not in page.split('<details class="full-code"')[0]
    assert f'href="/harnesses/{r.a.id}?against={r.seed.id}&amp;full=true#diff"' in fold
    assert '<span class="added">+3</span>' in page


def test_every_line_shows_the_folded_region(store, client):
    r = search_run(store)

    page = client.get(f"/harnesses/{r.a.id}?full=true").text

    assert 'class="diff-fold"' not in page
    assert any("def parse(text):" in row for row in _rows(page, "equal"))


def test_diff_against_a_harness_picked_from_the_archive(store, client):
    r = search_run(store)

    page = client.get(f"/harnesses/{r.e.id}?against={r.seed.id}").text

    heading = re.search(r'<h2 id="diff">(.*?)</h2>', page, re.S).group(1)
    assert "Diff against harness" in heading and f'href="/harnesses/{r.seed.id}"' in heading
    assert f'<option value="{r.seed.id}" selected>' in page
    assert "VOTES = 3" in _rows(page, "insert")[-1]
    assert f'href="/harnesses/{r.e.id}#diff">back to the parent</a>' in page
    # the picker offers every other harness of the run, grouped under it
    options = re.findall(r'<option value="(\d+)"', page)
    assert sorted(map(int, options)) == sorted(h.id for h in (r.seed, r.a, r.b, r.c, r.d, r.f, r.g))


def test_the_picker_offers_other_runs_harnesses_too(store, client):
    r = search_run(store)
    elsewhere = store.harness(store.run(name="eval other.py"), name="other.py")

    page = client.get(f"/harnesses/{r.a.id}").text

    assert f'<optgroup label="run {elsewhere.run_id} · eval other.py">' in page
    assert f'<option value="{elsewhere.id}">' in page
    assert "Diff against harness" in client.get(f"/harnesses/{r.a.id}?against={elsewhere.id}").text


def test_unknown_against_is_a_clear_404(store, client):
    r = search_run(store)

    response = client.get(f"/harnesses/{r.a.id}?against=9999")

    assert response.status_code == 404
    assert "Harness 9999 not found: there is nothing to compare against" in response.text
    assert client.get(f"/harnesses/{r.a.id}?against=abc").status_code == 422


def test_harness_without_parent_shows_its_code_and_says_so(store, client):
    r = search_run(store)

    page = client.get(f"/harnesses/{r.seed.id}").text

    assert 'id="no-parent"' in page and "No parent" in page
    assert 'class="diff"' not in page
    assert '<details class="full-code" open>' in page  # the code is shown unfolded
    assert "prompt" in page and 'class="highlight"' in page


def test_notes_links_and_scores_matrix(store, client):
    r = search_run(store)
    test = store.write(
        Evaluation(
            run_id=r.run.id,
            harness_id=r.c.id,
            checkpoint_id=r.c2.id,
            split="test",
            k=4,
            n_tasks=8,
            status="done",
            mean_at_k=0.7,
        )
    )

    page = client.get(f"/harnesses/{r.c.id}").text

    assert "three worked examples show the format" in page  # the hypothesis
    phase_link = f'href="/runs/{r.run.id}#harness-phase-{r.phase1.id}">harness phase 1</a>'
    assert phase_link + ", iteration 2" in page
    assert f'href="/rollouts?harness={r.c.id}"' in page
    assert f'href="/runs/{r.run.id}/lineage#node-{r.c.id}"' in page
    matrix = re.search(r'<table class="scores-matrix">.*?</table>', page, re.S).group(0)
    assert re.findall(r'<th class="num">(\w+)</th>', matrix) == ["harness", "test"]
    rows = re.findall(r"<tr>(.*?)</tr>", matrix.split("<tbody>")[1], re.S)
    checkpoints = [re.findall(r'href="/checkpoints/(\d+)"', row) for row in rows]
    assert checkpoints == [[str(r.c1.id)], [str(r.c2.id)]]

    def cells(row: str) -> list[tuple[str, str]]:  # (evaluation id, score) of each linked cell
        return re.findall(r'href="/rollouts\?evaluation=(\d+)"[^>]*>([\d.]+)</a>', row)

    assert [score for _, score in cells(rows[0])] == ["0.600"]
    assert [score for _, score in cells(rows[1])] == ["0.650", "0.700"]
    assert cells(rows[1])[1][0] == str(test.id)


def test_diff_data_folds_unchanged_stretches_between_hunks():
    old = "".join(f"line {i}\n" for i in range(40))
    new = old.replace("line 3\n", "line three\n").replace("line 30\n", "line 30\nadded\n")

    diff = side_by_side(old, new, context=2)

    first, second = diff["hunks"]
    # two lines of context on each side of a change; the 23 lines between the hunks folded
    assert first["folded_before"] == 1 and second["folded_before"] == 23
    assert [row["tag"] for row in first["rows"]] == ["equal", "equal", "replace", "equal", "equal"]
    assert diff["folded_after"] == 40 - 33 and (diff["added"], diff["removed"]) == (2, 1)
    assert side_by_side(old, old)["identical"] and side_by_side(old, old)["hunks"] == []


def test_the_page_gives_the_harness_s_own_turn_limit_and_its_run_s_clamp(store, client):
    """A harness declares MAX_TURNS; its run's [rollout] max_calls clamps it: both are shown."""
    r = search_run(store)
    run = store.run("clamped", config={"experiment": {"rollout": {"max_calls": 16}}})
    declares = store.harness(run, name="turns.py", code="MAX_TURNS = 4\n" + r.a.code)
    plain = store.harness(run, name="plain.py", code=r.seed.code)

    page = client.get(f"/harnesses/{declares.id}").text
    assert "MAX_TURNS 4, clamp 16" in page
    assert "MAX_TURNS not declared, clamp 16" in client.get(f"/harnesses/{plain.id}").text
    assert "clamp the default" in client.get(f"/harnesses/{r.seed.id}").text  # no max_calls
    data = client.get(f"/api/harnesses/{declares.id}").json()
    assert data["turns"] == {"declared": 4, "clamp": 16}
