from tests.api.synthetic_store import client, store, workbench  # noqa: F401 - fixtures
