"""`python -m app.loop`: the loop worker of `whale serve` (app/loop/manager.py)."""

from app.loop.manager import main

main()
