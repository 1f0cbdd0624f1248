"""The rules every proposer is given (docs/algorithm.md, "Rules the proposer is given")."""

CONTRACT = """\
A harness is one Python file defining `run(task, llm, tools)`, which returns the answer (a string)
or None. `task` holds the task's public fields. `llm.chat(messages, **sampling)` makes one model
call and returns a message with `.content`; sampling accepts temperature, top_p, max_tokens,
stop and seed. `tools.<name>(...)` calls the domain's tools. Module-level knobs may be declared
in `PARAMS = {"NAME": [choices...]}`. A module-level `MAX_TURNS = n` (a plain integer) declares
the most model calls one rollout of it may make, within the run's clamp. The harness runs in a sandbox without network; only the
standard library is available and some modules are forbidden by the domain."""

RULES = """\
- One mechanism per candidate: each candidate tests one idea, stated as a hypothesis.
- No pure single-parameter tweaks: change how the harness works, not only a constant.
- No dataset- or answer-specific hard-coding: the harness must work on unseen tasks.
- Prototype before writing: read the traces and check your idea against real failures.
- Name the axis each candidate touches (prompt, context, tools, sampling, voting, parsing,
  control flow, stopping, turn budget) and say what changed.
- Keep `run(task, llm, tools)` and the tool calls intact; invalid candidates are recorded as
  failures and cost an iteration.
- The harness sees `task`, `llm` and `tools`, nothing else: do not try to reach the test split,
  the gold answers, the network or the workbench's files (the sandbox refuses them, and a
  candidate that tries is a failure).
- Do not game the verifier: an output shaped to exploit a scoring rule rather than to answer the
  task is a defect even when it scores."""
