# The page tests build their data with the API tests' store.
from tests.api.synthetic_store import client, store, workbench  # noqa: F401 - fixtures
