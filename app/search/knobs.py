"""The `knobs` proposer: coordinate descent over a harness's declared PARAMS, no LLM.

A harness declares `PARAMS = {"NAME": [choices...]}` and assigns each knob at module level
(`NAME = value`). Each iteration picks the next knob in declaration order, cycling across the
phases of the run (a new phase goes on where the last one stopped), and proposes
the accepted harness with that knob set to each choice not tried yet in this run; knobs whose
choices are all tried are skipped. Candidates are the accepted code with one assignment
rewritten, so a diff shows exactly the knob that moved.
"""

import ast
import json

from app.search.candidate import Candidate, Proposal
from app.search.context import SearchContext
from app.syntax_tree import parse


def declared_params(code: str) -> dict[str, list]:
    """PARAMS of the harness, {} when it declares none (or they are not literals)."""
    for node in parse(code).body:
        if isinstance(node, ast.Assign) and _target(node) == "PARAMS":
            try:
                params = ast.literal_eval(node.value)
            except ValueError:
                return {}
            return {k: list(v) for k, v in params.items()} if isinstance(params, dict) else {}
    return {}


def current_values(code: str) -> dict[str, object]:
    values = {}
    for node in parse(code).body:
        if isinstance(node, ast.Assign) and _target(node):
            try:
                values[_target(node)] = ast.literal_eval(node.value)
            except ValueError:
                pass
    return values


def with_knob(code: str, name: str, value) -> str:
    """The code with the value of the module-level assignment of `name` replaced by `value`,
    and nothing else touched: the line's comment and the file's quote style stay, so the diff
    shows the one change."""
    for node in parse(code).body:
        if isinstance(node, ast.Assign) and _target(node) == name:
            old = ast.get_source_segment(code, node.value) or ""
            start = _offset(code, node.value.lineno, node.value.col_offset)
            end = _offset(code, node.value.end_lineno, node.value.end_col_offset)
            return code[:start] + _literal(value, old) + code[end:]
    raise KeyError(f"{name} is in PARAMS but never assigned at module level")


def _offset(code: str, lineno: int, col: int) -> int:
    """The string index of an ast position (its column counts UTF-8 bytes)."""
    lines = code.splitlines(keepends=True)
    line = lines[lineno - 1]
    return sum(map(len, lines[: lineno - 1])) + len(line.encode()[:col].decode())


def _literal(value, old: str) -> str:
    """`value` as Python source, a string in double quotes where the old value had them."""
    if isinstance(value, str) and old.startswith('"'):
        return json.dumps(value, ensure_ascii=False)  # a JSON string is a Python literal too
    return repr(value)


def _target(node: ast.Assign) -> str | None:
    if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
        return node.targets[0].id
    return None


class KnobsProposer:
    name = "knobs"

    async def propose(self, ctx: SearchContext) -> Proposal:
        accepted = ctx.accepted
        params = declared_params(accepted.code)
        if not params:
            return Proposal(report="the accepted harness declares no PARAMS: nothing to tune")
        values = current_values(accepted.code)
        order = list(params)  # declaration order: the harness author's priorities
        # Coordinate descent: start at this iteration's knob, move on while a knob is exhausted.
        for offset in range(len(order)):
            knob = order[(ctx.proposals_before + offset) % len(order)]
            fresh = []
            for choice in params[knob]:
                if choice == values.get(knob):
                    continue
                code = with_knob(accepted.code, knob, choice)
                if not ctx.seen(code):
                    fresh.append((choice, code))
            if fresh:
                break
        else:
            return Proposal(report="every choice of every knob has been tried: exhausted")
        candidates = [
            Candidate(
                name=f"{knob.lower()}-{choice}",
                code=code,
                axis=knob,
                hypothesis=f"{knob} = {choice!r} scores better than {values.get(knob)!r}",
                changes=f"{knob}: {values.get(knob)!r} -> {choice!r}",
                parent_ids=[accepted.id],
            )
            for choice, code in fresh[: ctx.k]
        ]
        return Proposal(
            candidates,
            report=f"coordinate {knob}: {len(candidates)} of "
            f"{len(params[knob]) - 1} alternatives proposed",
        )
