import pytest

from app.domains import SPLITS, Task, get_domain
from app.domains.arith import Arith


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
