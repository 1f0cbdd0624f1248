"""Reports over the store as files: runs compared in one figure (PNG), a run exported as plain
files. The numbers they show come from the read side (app/read/)."""

from app.read.compare import compare_runs
from app.read.runs import UnknownRuns
from app.report.export import export_run
from app.report.plot import plot_accuracy_vs_rollouts

__all__ = ["compare_runs", "export_run", "plot_accuracy_vs_rollouts", "UnknownRuns"]
