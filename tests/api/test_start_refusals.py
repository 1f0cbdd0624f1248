"""Starting a run over HTTP (POST /api/runs and the UI's form) never makes the server read a
path of the client's choosing, and every key is checked before a run exists: a harness that is
not a harness, an absurd number. Nothing is stored for a refused experiment."""

import sqlite3

import pytest

from app.loop import experiment_file as experiment_module
from app.loop.experiment_file import ExperimentError, parse
from tests.conftest import error_detail

SEED = 'harness = "harness_archive/seeds/arith/seed.py"'


def csrf(client) -> dict:
    return {"X-CSRF-Token": client.get("/api/csrf").json()["csrf_token"]}


def rows(workbench, table: str) -> int:
    with sqlite3.connect(workbench.settings.db_path) as db:
        return db.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


@pytest.mark.parametrize(
    "line, message",
    [
        ('harness = "/etc/passwd"', "harness: '/etc/passwd' is not a file of harness_archive/"),
        ('harness = "harness_archive/../../../../etc/passwd"', "is not a file of harness_archive/"),
        (
            'harness = "harness_archive/seeds/arith/../../../README.md"',
            "is not a file of harness_archive/",
        ),
        ('harness = "harness_archive/seeds/arith/missing.py"', "is not a file of harness_archive/"),
        ('harness_code = "print(1)"', "harness_code: not a harness: no module-level `def run"),
        (
            'harness_code = "def run(task, llm, tools)\\n"',
            "harness_code: not a harness: syntax error",
        ),
        (
            'harness_code = "import subprocess\\ndef run(t, l, x):\\n    return 1\\n"',
            "harness_code: not a harness: forbidden import: subprocess",
        ),
        ("harness_id = 4242", "harness_id: no harness 4242"),
        (
            SEED + '\nharness_code = "def run(t, l, x):\\n    return 1\\n"',
            "give one of harness, harness_id, harness_code (given: harness, harness_code)",
        ),
        (
            "[budget]\nrollouts = 99999999999999999999999",
            "budget.rollouts: Input should be less than or equal to 10000000000",
        ),
        ("[test]\nk = 100000", "test.k: Input should be less than or equal to 1024"),
        (
            "[budget]\nwall_s = inf",
            "budget.wall_s: Input should be less than or equal to 100000000",
        ),
        (
            "[rft]\nsamples_per_prompt = 99999999999",
            "rft.samples_per_prompt: Input should be less than or equal to 1024",
        ),
        ("seed = -1", "seed: Input should be greater than or equal to 0"),
        # generation settings the backend (here the embedded local server) cannot honour
        ("[sampling]\ntop_k = 20", "sampling: top_k: the local backend does not support it"),
        ("[sampling]\ntemprature = 0.5", "sampling.temprature: Extra inputs are not permitted"),
        (
            "[rollout]\nmax_tokens_per_call = 9000\nmax_completion_tokens = 8000",
            "max_tokens_per_call (9000) is above max_completion_tokens (8000)",
        ),
        ("[rollout]\nmax_calls = 0", "rollout.max_calls: Input should be greater than or equal"),
        (
            'strategy = "harness_only"\n[switching]\nend_on = "weight"\n[budget]\nrollouts = 99',
            "switching.end_on = weight needs strategy whale, stagewise or fast_slow and budget.rollouts",
        ),
        ('[switching]\nend_on = "weight"', "or fast_slow and budget.rollouts"),
        ("seeds = [0, 1]", "seeds: a seed group runs from the command line"),
    ],
)
def test_a_refused_experiment_names_the_key_and_stores_nothing(client, workbench, line, message):
    answer = client.post(
        "/api/runs", headers=csrf(client), json={"experiment": f'name = "x"\n{line}\n'}
    )
    assert answer.status_code == 422, answer.text
    assert message in error_detail(answer)
    assert rows(workbench, "run") == rows(workbench, "harness") == 0


def test_the_form_refuses_a_server_path_in_place(client, workbench):
    page = client.post(
        "/runs", headers=csrf(client), data={"experiment": 'name = "x"\nharness = "/etc/passwd"\n'}
    )
    assert page.status_code == 422
    assert 'id="start-error"' in page.text and "is not a file of harness_archive/" in page.text
    assert "root:" not in page.text  # not a byte of the file
    assert rows(workbench, "run") == rows(workbench, "harness") == 0


def test_a_stored_broken_harness_is_refused_by_id(client, workbench, store):
    run = store.run()
    broken = store.harness(run, code="def run(task, llm, tools):\n    return (\n")
    answer = client.post(
        "/api/runs",
        headers=csrf(client),
        json={"experiment": f'name = "x"\nharness_id = {broken.id}\n'},
    )
    assert answer.status_code == 422
    assert "harness_id: not a harness: syntax error" in error_detail(answer)
    assert rows(workbench, "run") == 1  # only the one made here


def test_over_http_a_symlink_out_of_the_archive_is_refused(tmp_path, monkeypatch):
    root = tmp_path / "repo"
    (root / "harness_archive" / "seeds").mkdir(parents=True)
    secret = tmp_path / "secret.py"
    secret.write_text("def run(task, llm, tools):\n    return 'secret'\n")
    (root / "harness_archive" / "seeds" / "link.py").symlink_to(secret)
    (root / "harness_archive" / "seeds" / "own.py").write_text(secret.read_text())
    monkeypatch.setattr(experiment_module, "ROOT", root)
    monkeypatch.setattr(experiment_module, "ARCHIVE", root / "harness_archive")
    with pytest.raises(ExperimentError, match="not a file of harness_archive/"):
        parse('name = "x"\nharness = "harness_archive/seeds/link.py"', "api", web=True)
    ok = parse('name = "x"\nharness = "harness_archive/seeds/own.py"', "api", web=True)
    assert ok.harness == root / "harness_archive" / "seeds" / "own.py"
    # the command line still takes any file the user names
    assert parse(f'name = "x"\nharness = "{secret}"', "x.toml").harness == secret


@pytest.mark.parametrize(
    "url",
    [
        "/api/rollouts?q=%00",
        "/api/rollouts?q=a%00b",
        "/api/rollouts?task=%01",
        "/rollouts?q=%00",
        "/rollouts?task=x%1Fy",
    ],
)
def test_text_filters_refuse_control_characters(client, store, url):
    run = store.run()
    evaluation = store.evaluation(run, store.harness(run), store.checkpoint(), n_tasks=3)
    store.rollouts(evaluation, ["pass", "fail", "fail"])
    answer = client.get(url)
    assert answer.status_code == 422, answer.text
    assert "control characters are not allowed (found U+00" in error_detail(answer)


def test_a_nul_free_search_still_matches_only_what_it_says(client, store):
    run = store.run()
    evaluation = store.evaluation(run, store.harness(run), store.checkpoint(), n_tasks=3)
    store.rollouts(evaluation, ["pass", "fail", "fail"])
    assert client.get("/api/rollouts", params={"q": "no such text"}).json()["items"] == []
