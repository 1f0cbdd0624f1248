"""The WHALE loop: experiments, strategies, switching rules, budgets, control, resume."""
