"""Python syntax trees built safely from any thread.

CPython 3.11 keeps the AST constructor's recursion depth in state the whole interpreter shares:
two threads building trees at once can fail with "SystemError: AST constructor recursion depth
mismatch" (python/cpython#106905 and its neighbours). It was seen here when the store's writer
thread read a harness's MAX_TURNS while the loop's thread parsed beside it, and it failed the run.
Every tree the workbench builds goes through one lock; a library building one in its own thread
at the same moment can still trip it, so that SystemError is tried again (parsing has no effects).
"""

import ast
import threading

_one_at_a_time = threading.Lock()
ATTEMPTS = 3


def parse(source: str, mode: str = "exec") -> ast.AST:
    """ast.parse, one thread at a time; SyntaxError as ast.parse raises it."""
    for _ in range(ATTEMPTS - 1):
        with _one_at_a_time:
            try:
                return ast.parse(source, mode=mode)
            except SystemError as exc:
                if "recursion depth mismatch" not in str(exc):
                    raise
    with _one_at_a_time:  # the last attempt: its error is the caller's
        return ast.parse(source, mode=mode)


def literal(text: str):
    """ast.literal_eval of a string, its tree built by `parse`."""
    return ast.literal_eval(parse(text.lstrip(" \t"), mode="eval"))  # as literal_eval strips
