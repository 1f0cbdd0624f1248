"""Sandboxes that confine untrusted code: harnesses' rollouts (runner.py runs inside; the
backends, process.py and docker.py, outside) and the `agent` proposer's coding agent
(agent_sandbox.py, with its egress proxy)."""
