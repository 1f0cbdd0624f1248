"""Reports over the store as files: runs compared in one figure (app/report/plot.py, PNG), a run
exported as plain files (app/report/export.py) and imported again (app/report/import_run.py).
The numbers they show come from the read side (app/read/). Nothing is imported here: the figure
loads matplotlib, which every `whale` command would otherwise pay for at start."""
