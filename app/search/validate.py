"""Static checks a candidate must pass before it costs a sandbox rollout.

The sandbox enforces forbidden imports at run time too; checking here gives the proposer a clear
error without spending a rollout, and catches imports on code paths a smoke rollout never takes.
"""

import ast


def static_error(code: str | None, forbidden_modules: frozenset[str], max_bytes: int) -> str | None:
    """Why the code cannot be a harness, or None when it may go on to the smoke rollout."""
    if code is None or not code.strip():
        return "empty: no code"
    if len(code.encode()) > max_bytes:
        return f"too large: {len(code.encode())} bytes (limit {max_bytes})"
    try:
        tree = ast.parse(code)
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
