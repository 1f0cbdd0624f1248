"""Reports over the store: runs compared side by side (a table and a figure), a run exported
as plain files. `app.report.cli` wraps them as the `whale compare` and `whale export` commands."""

from app.report.compare import compare_runs
from app.report.export import export_run
from app.report.plot import plot_accuracy_vs_rollouts
from app.report.runs import UnknownRuns

__all__ = ["compare_runs", "export_run", "plot_accuracy_vs_rollouts", "UnknownRuns"]
