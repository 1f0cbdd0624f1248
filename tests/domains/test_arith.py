import importlib.util
import sqlite3

import pytest

from app.domains import SPLITS, Task, get_domain
from app.domains.arith import Arith
from tests.conftest import REPO, whale_eval_json


def test_splits_are_fixed_disjoint_and_hide_the_answer():
    a, b = Arith(), Arith()  # built twice: the same seed gives the same tasks
    questions = {}
    for split in SPLITS:
        tasks = a.tasks(split)
        assert [t.public for t in tasks] == [t.public for t in b.tasks(split)]  # same seed
        questions[split] = {t.public["question"] for t in tasks}
        assert all(t.gold not in t.public.values() for t in tasks)
    assert not questions["train"] & questions["test"]
    assert not questions["harness"] & questions["test"]
    assert not questions["train"] & questions["harness"]


def test_gold_answers_are_right():
    for task in get_domain("arith").tasks("test"):
        expr = task.public["question"].removeprefix("What is ").rstrip("?")
        assert str(eval(expr)) == task.gold


def test_glyphs_hide_the_operator_and_keep_the_problems_and_answers():
    plain, glyphs = get_domain("arith").tasks("test"), get_domain("arith-glyphs").tasks("test")
    for a, g in zip(plain, glyphs, strict=True):
        assert (g.id, g.gold) == (a.id, a.gold)
        question = g.public["question"]
        assert not set("+-*") & set(question.removeprefix("What is "))
        for op, glyph in {"+": "#", "-": "@", "*": "&"}.items():
            question = question.replace(glyph, op)
        assert question == a.public["question"]
    # the skill a proposer reads names the glyphs but never says what they mean
    skill = get_domain("arith-glyphs").skill.read_text()
    assert "#" in skill and "not stated" in skill
    assert not any(f"{g}` means" in skill or f"{g} means" in skill for g in "#@&")


@pytest.mark.parametrize(
    "answer,score",
    [
        ("42", 1.0),
        ("The answer is 42.", 1.0),
        ("40 + 2 = 42", 1.0),
        ("1,042", 0.0),
        ("42 or 43", 0.0),
        ("no idea", 0.0),
        (None, 0.0),
        ("-42", 0.0),
    ],
)
def test_score_takes_the_last_number(answer, score):
    assert get_domain("arith").score(answer, Task("t", {}, "42")) == score


def test_unknown_domain_and_split_are_named():
    with pytest.raises(ValueError, match="unknown domain 'checkers'"):
        get_domain("checkers")
    with pytest.raises(ValueError, match="unknown split 'dev'"):
        get_domain("arith").tasks("dev")


POSTFIX_SEED = REPO / "harness_archive/seeds/arith/postfix.py"


@pytest.mark.parametrize(
    "reply,value",
    [
        ("23 45 +", "68"),
        ("The calculation: 81 27 -", "54"),
        ("7 8*", "56"),
        ("23 + 45", None),  # infix is not the format
        ("68", None),
        ("", None),
    ],
)
def test_the_postfix_seed_reads_postfix_only(reply, value):
    spec = importlib.util.spec_from_file_location("postfix_seed", POSTFIX_SEED)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.postfix_value(reply) == value


def test_the_postfix_seed_runs_under_its_postfix_solver(tmp_path, whale_env):
    """Both of its solvers run in a sandbox on the real model: every rollout ends pass or fail,
    none with an error (what a search of its knobs relies on)."""
    from app.search.knobs import with_knob

    harness = tmp_path / "postfix.py"
    for solver in ("model", "postfix"):
        harness.write_text(with_knob(POSTFIX_SEED.read_text(), "SOLVER", solver))
        out = whale_eval_json(harness, whale_env, "--limit", "4", "-k", "1")
        assert out["n_rollouts"] == 4
    con = sqlite3.connect(tmp_path / "home" / "whale.db")
    statuses = {s for (s,) in con.execute("SELECT status FROM rollout")}
    assert statuses <= {"pass", "fail"}, statuses
