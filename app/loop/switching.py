"""When a phase ends (docs/algorithm.md, "When to switch"). Pure functions of what the phase
has seen so far; each returns why the phase ends now ("fixed", "patience", "cap") or None."""

from app.experiment_schema import Switching


def harness_phase_end(rule: Switching, best_success: list[float]) -> str | None:
    """`best_success[i]`: best frontier success after iteration i (0 = the incoming harness).
    Asked before each proposing iteration."""
    done = len(best_success) - 1  # proposing iterations finished
    if rule.rule == "fixed":
        return "fixed" if done >= rule.proposing_iterations_per_phase else None
    if done >= rule.harness_max_iterations:
        return "cap"
    best = max(best_success)
    best_iteration = best_success.index(best)  # the first time the best was reached
    if done >= rule.harness_min_iterations and done - best_iteration >= rule.harness_patience:
        return "patience"
    return None


def weight_phase_end(rule: Switching, mean_rewards: list[float]) -> str | None:
    """`mean_rewards[i]`: mean training reward of step i of this phase. Asked before each step.

    Step i's reward is sampled from the checkpoint the phase holds *before* step i's update, so
    it measures checkpoint i; after `done` steps, `done - i` updates have passed since it.
    `weight_burn_in` is the minimum phase, inclusive. With the paper's window = patience =
    minimum = 15, a phase whose best is its first checkpoint ends after step 15, not 16."""
    done = len(mean_rewards)
    if rule.rule == "fixed":
        return "fixed" if done >= rule.weight_steps_per_phase else None
    if done >= rule.weight_max_steps:
        return "cap"
    window = rule.weight_window
    first = 0 if rule.weight_partial_windows else window - 1  # the first step with a window
    if done < rule.weight_burn_in or done <= first:
        return None
    smoothed = [
        sum(mean_rewards[max(i - window + 1, 0) : i + 1]) / min(i + 1, window)
        for i in range(first, done)
    ]
    best_step = first + smoothed.index(max(smoothed))
    return "patience" if done - best_step >= rule.weight_patience else None
