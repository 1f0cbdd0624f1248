"""A harness's code read without running it: the static checks a candidate must pass before it
costs a sandbox rollout, the turn limit it declares (MAX_TURNS), and its fixed parts. The
evaluator, the loop, the trainer, the harness phase and the pages all read it so.

The sandbox enforces forbidden imports at run time too; checking here gives the proposer a clear
error without spending a rollout, and catches imports on code paths a smoke rollout never takes.
"""

import ast

from app.syntax_tree import parse


def static_error(code: str | None, forbidden_modules: frozenset[str], max_bytes: int) -> str | None:
    """Why the code cannot be a harness, or None when it may go on to the smoke rollout."""
    if code is None or not code.strip():
        return "empty: no code"
    if len(code.encode()) > max_bytes:
        return f"too large: {len(code.encode())} bytes (limit {max_bytes})"
    try:
        tree = parse(code)
    except SyntaxError as exc:
        return f"syntax error: line {exc.lineno}: {exc.msg}"
    if not any(isinstance(n, ast.FunctionDef) and n.name == "run" for n in tree.body):
        return "no module-level `def run(task, llm, tools)`"
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        for name in names:
            if name.split(".")[0] in forbidden_modules:
                return f"forbidden import: {name} (line {node.lineno})"
    return None


def declared_turns(code: str | None) -> int | None:
    """The turn limit a harness declares: a module-level `MAX_TURNS = <positive int>`, read
    without running the code (as the release's resolve_harness_max_turns.py falls back to).
    None when it declares none or not as a plain integer. The run's `[rollout] max_calls` clamps
    it (docs/harness.md, "Turn budget")."""
    try:
        tree = parse(code or "")
    except SyntaxError:
        return None
    found = None
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and any(
            isinstance(t, ast.Name) and t.id == "MAX_TURNS" for t in targets
        ):
            value = node.value
            ok = isinstance(value, ast.Constant) and type(value.value) is int and value.value > 0
            found = value.value if ok else None  # the last assignment is the one that holds
    return found


def fixed_parts_error(code: str | None, reference: str | None, names: list[str]) -> str | None:
    """Why a candidate breaks a fixed-runner contract, or None: each module-level function of
    `names` that the reference (the phase's incoming harness) defines must be in the candidate,
    its code the same (compared as syntax trees: comments, docstrings and layout aside). The
    release's chess candidate is such a module: its prompts, observation, parsing, legality
    check, retry budgets and MAX_TURNS change, the runner that calls them does not."""
    if not names:
        return None

    def functions(text: str | None) -> dict[str, str]:
        try:
            tree = parse(text or "")
        except SyntaxError:
            return {}
        found = {}
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name in names:
                body = node.body
                if (
                    body
                    and isinstance(body[0], ast.Expr)
                    and isinstance(body[0].value, ast.Constant)
                ):
                    node.body = body[1:] or [ast.Pass()]  # a docstring may differ
                found[node.name] = ast.dump(node)
        return found

    wanted, given = functions(reference), functions(code)
    for name in names:
        if name in wanted and given.get(name) != wanted[name]:
            how = "is missing" if name not in given else "differs from the incoming harness's"
            return (
                f"fixed function `{name}` {how}: this run's candidates change the module around "
                f"it (search.fixed_functions = {names}), never `{name}` itself"
            )
    return None
