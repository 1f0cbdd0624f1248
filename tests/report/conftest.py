import pytest

from tests.api.synthetic_store import client, store, workbench  # noqa: F401 - fixtures
from tests.report.synthetic_experiments import Experiments, experiments


@pytest.fixture
def filled(store) -> Experiments:  # noqa: F811 - the store fixture imported above
    return experiments(store)


@pytest.fixture
def session(workbench, filled):  # noqa: F811
    with workbench.session() as session:
        yield session
