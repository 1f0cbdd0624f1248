"""The start form as a fork (docs/loop.md, "Forks"), on the synthetic store: a refused fork
comes back still a fork, and "Fork from here" on a run of a seed group fills in the experiment
as that run ran it (its seed), not the group's file."""

import html
import re
import tomllib

from app.db.schema import Run
from app.loop.driver import stored
from app.loop.experiment_file import parse
from tests.web.test_dashboard_pages import csrf_token, loop_run

# a seed group's file, as `whale run group.toml` (or `--seeds 0,1,2`) read it
GROUP_FILE = """\
# three seeds of the quick loop
name = "grouped"
domain = "arith"
seed = 0
seeds = [
  0, 1,
  2,  # the last one
]
strategy = "whale"   # kept as written

[rft]
seed = 7  # the trainer's own, not the run's
"""


def textarea(page: str) -> str:
    return html.unescape(
        re.search(r'<textarea id="experiment"[^>]*>(.*?)</textarea>', page, re.S)[1]
    )


def test_a_refused_fork_comes_back_as_the_same_fork(store, client):
    """The form keeps its fork point, and the runs behind it are every run, not those tagged
    with the fork point: fixing the text and starting again starts the fork, not a plain run."""
    other = loop_run(store, "unrelated", status="done")
    response = client.post(
        "/runs",
        headers={"HX-Request": "true", "X-CSRF-Token": csrf_token(client)},
        data={"experiment": 'name = "fork"\ndomain = "arith\n', "fork_from": f"{other.id}:1"},
    )
    assert response.status_code == 422
    assert "not valid TOML" in response.text
    assert f'name="fork_from" value="{other.id}:1"' in response.text
    assert response.context["tag"] is None
    assert [r["id"] for r in response.context["runs"]] == [other.id]


def group_run(store, seed: int, text: str = GROUP_FILE, seeds=(0, 1, 2)) -> Run:
    """A finished run of a seed group, kept as `whale run` keeps it: the group's file as its
    source, the experiment with its own seed (`seeds` None: a run of no group)."""
    experiment = parse(text, "group.toml", seed=seed if seeds else None)
    config = {"experiment": stored(experiment), "source": text, "hash": "h"}
    if seeds:
        config["group"] = {"name": "grouped", "seeds": list(seeds)}
    return store.write(
        Run(
            name=experiment.name,
            kind="experiment",
            domain="arith",
            status="done",
            strategy="whale",
            config=config,
        )
    )


def test_fork_from_here_on_a_seed_groups_run_fills_in_its_own_seed(store, client):
    run = group_run(store, seed=2)
    expected = GROUP_FILE.replace("seed = 0\nseeds = [\n  0, 1,\n  2,  # the last one\n]\n", "")
    expected = expected.replace('domain = "arith"\n', 'domain = "arith"\nseed = 2\n')
    data = client.get(f"/api/runs?from={run.id}:0").json()
    assert (data["error"], data["fork_from"]) == (None, f"{run.id}:0")
    assert data["experiment"] == expected
    assert tomllib.loads(data["experiment"])["rft"]["seed"] == 7
    assert textarea(client.get(f"/runs?from={run.id}:0").text) == expected
    # the web takes it as it is (a file with `seeds` it refuses): the seed the run ran with
    assert parse(data["experiment"], web=True, fork=True).seed == 2


def test_a_seed_set_by_the_command_line_replaces_the_files_or_is_added(store, client):
    """`whale run plain.toml --seeds 4,5`: the file has no `seeds`, maybe no `seed`."""
    plain = 'name = "plain"\ndomain = "arith"\n\n[budget]\nrollouts = 20\n'
    run = group_run(store, seed=5, text=plain, seeds=(4, 5))
    data = client.get(f"/api/runs?from={run.id}:0").json()
    assert data["experiment"] == plain.replace("\n\n[budget]", "\nseed = 5\n\n[budget]")
    seeded = plain.replace('domain = "arith"\n', 'domain = "arith"\nseed = 1  # mine\n')
    run = group_run(store, seed=4, text=seeded, seeds=(4, 5))
    data = client.get(f"/api/runs?from={run.id}:0").json()
    assert data["experiment"] == plain.replace('domain = "arith"\n', 'domain = "arith"\nseed = 4\n')


def test_a_run_of_no_group_is_filled_in_as_its_file(store, client):
    text = 'name = "single"\ndomain = "arith"\nseed = 3\n'
    run = group_run(store, seed=3, text=text, seeds=None)
    assert client.get(f"/api/runs?from={run.id}:0").json()["experiment"] == text
