"""The compare page's settings diff: each run's experiment flattened to dotted keys, the keys
that differ with each run's value, in the JSON and on the page."""

import html
import re

from app.db.schema import Run
from app.loop.experiment_file import parse, stored
from tests.loop.conftest import quick_toml


def experiment_run(store, text: str) -> Run:
    experiment = parse(text)
    config = {"experiment": stored(experiment), "source": text, "hash": "x", "start": {}}
    return store.write(
        Run(
            name=experiment.name,
            kind="experiment",
            domain="arith",
            strategy=experiment.strategy,
            status="done",
            config=config,
        )
    )


def test_the_keys_that_differ_are_listed_with_each_runs_value(store, client):
    a = experiment_run(store, quick_toml("a", "whale", rft={"lr": "1e-3"}))
    b = experiment_run(store, quick_toml("b", "harness_only", rft={"lr": "5e-4"}))
    rft = store.write(
        Run(name="rft", kind="rft", domain="arith", status="done", config={"test_k": 2})
    )

    data = client.get("/api/runs/compare", params={"ids": [a.id, b.id]}).json()["config_diff"]

    assert data["run_ids"] == [a.id, b.id]
    differs = {row["key"]: row["values"] for row in data["differs"]}
    assert differs == {
        "name": ["a", "b"],
        "rft.lr": [0.001, 0.0005],
        "strategy": ["whale", "harness_only"],
    }
    assert data["same"]["rft.lora_rank"] == 4 and data["same"]["budget.rollouts"] == 60
    assert not {"source", "hash"} & set(data["same"]) and "start.harness_id" not in data["same"]

    # a key only some runs have: its absence is said, not taken for a value
    three = client.get("/api/runs/compare", params={"ids": [a.id, rft.id]}).json()
    rows = {row["key"]: row for row in three["config_diff"]["differs"]}
    assert rows["test_k"]["absent"] == [a.id] and rows["test_k"]["values"] == [None, 2]
    assert rows["rft.lr"]["absent"] == [rft.id]
    assert three["config_diff"]["same"] == {}


def test_the_page_shows_the_diff_beside_the_curves(store, client):
    a = experiment_run(store, quick_toml("a", "whale", rft={"lr": "1e-3"}))
    b = experiment_run(store, quick_toml("b", "whale", rft={"lr": "5e-4"}))

    page = client.get("/runs/compare", params={"ids": [a.id, b.id]}).text

    table = re.search(r'<table id="config-diff-table">(.*?)</table>', page, re.S).group(1)
    cells = [html.unescape(c.strip()) for c in re.findall(r"<td[^>]*>(.*?)</td>", table, re.S)]
    assert cells == ["name", '"a"', '"b"', "rft.lr", "0.001", "0.0005"]
    assert "2 differ" in page and "the same)" in page
    assert page.index('class="charts wide"') < page.index('id="config-diff"')


def test_one_run_has_nothing_to_diff(store, client):
    a = experiment_run(store, quick_toml("a"))

    page = client.get("/runs/compare", params={"ids": [a.id]}).text

    assert "One run: nothing to compare its settings with." in page
