"""What differs between the runs' experiments, key by key: each run's stored experiment (every
value of its file, the defaults filled in; app/loop/experiment_file.py `stored`) flattened to dotted
keys (`rft.lr`), and the keys whose values are not the same in every run, with each run's value.
The compare page shows it beside the curves: what changed is what the curves are to explain."""

from typing import Any

from app.db.schema import Run
from app.experiment_schema import flatten

# Kept in a run's config but no setting of it: the file's text (its values are the keys
# compared), its hash, and the ids of the harness and checkpoint it started from.
NOT_SETTINGS = ("source", "hash", "start")


def settings_of(run: Run) -> dict[str, Any]:
    """A run's settings as dotted keys: its experiment's for a loop run, else what the command
    that made it recorded (`whale train`: its [rft] values, test k, ...)."""
    config = run.config or {}
    if "experiment" in config:
        flat = flatten(config["experiment"])
        if config.get("group"):  # one seed of a seed group: which group
            flat |= flatten(config["group"], "group")
        return flat
    return flatten({k: v for k, v in config.items() if k not in NOT_SETTINGS})


def config_diff(runs: list[Run]) -> dict[str, Any]:
    """The keys that differ across `runs` (rows: {key, values in the runs' order, absent: the
    runs that lack the key}) and those all of them share ({key: value})."""
    flats = [settings_of(run) for run in runs]
    keys = sorted({key for flat in flats for key in flat})
    differs, same = [], {}
    for key in keys:
        values = [flat.get(key) for flat in flats]
        absent = [run.id for run, flat in zip(runs, flats) if key not in flat]
        if not absent and all(v == values[0] for v in values):
            same[key] = values[0]
        else:
            differs.append({"key": key, "values": values, "absent": absent})
    return {"run_ids": [run.id for run in runs], "differs": differs, "same": same}
