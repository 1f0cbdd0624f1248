"""Looking up the runs a report is about, so every report refuses unknown ids the same way."""

from sqlmodel import Session, select

from app.db.schema import Run


class UnknownRuns(LookupError):
    """Some of the requested run ids are not in the store."""

    def __init__(self, ids: list[int]):
        self.ids = ids
        super().__init__(f"no run {', '.join(map(str, ids))} in this store")


def get_runs(session: Session, run_ids: list[int]) -> list[Run]:
    """The runs in the order asked; raises UnknownRuns naming every missing id."""
    found = {run.id: run for run in session.exec(select(Run).where(Run.id.in_(run_ids)))}
    missing = [i for i in dict.fromkeys(run_ids) if i not in found]
    if missing:
        raise UnknownRuns(missing)
    return [found[i] for i in run_ids]
