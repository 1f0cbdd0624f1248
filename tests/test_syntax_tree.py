"""app.syntax_tree: the workbench's syntax trees are built one thread at a time, and CPython
3.11's spurious SystemError from two trees built at once is tried again."""

import ast
import threading
import time

import pytest

from app import syntax_tree
from app.harness_code import declared_turns


def test_trees_are_built_one_thread_at_a_time(monkeypatch):
    inside, most = [0], [0]
    real = ast.parse

    def slow_parse(source, mode="exec"):
        inside[0] += 1
        most[0] = max(most[0], inside[0])
        time.sleep(0.01)  # long enough for the other threads to try to come in
        inside[0] -= 1
        return real(source, mode=mode)

    monkeypatch.setattr(ast, "parse", slow_parse)
    threads = [
        threading.Thread(target=declared_turns, args=(f"MAX_TURNS = {n}\n",)) for n in range(1, 9)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert most[0] == 1


def test_the_recursion_depth_mismatch_is_tried_again_and_other_errors_are_not(monkeypatch):
    real, calls = ast.parse, []

    def flaky(source, mode="exec"):
        calls.append(source)
        if len(calls) == 1:
            raise SystemError("AST constructor recursion depth mismatch (before=30, after=239)")
        return real(source, mode=mode)

    monkeypatch.setattr(ast, "parse", flaky)
    assert declared_turns("MAX_TURNS = 7\n") == 7 and len(calls) == 2
    assert syntax_tree.literal(" [1, {'a': (2, 3)}]") == [1, {"a": (2, 3)}]

    def broken(source, mode="exec"):
        raise SystemError("something else")

    monkeypatch.setattr(ast, "parse", broken)
    with pytest.raises(SystemError, match="something else"):
        syntax_tree.parse("x = 1")
    monkeypatch.setattr(ast, "parse", real)
    with pytest.raises(SyntaxError):
        syntax_tree.parse("def (")
