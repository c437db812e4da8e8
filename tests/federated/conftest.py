"""The federated tests run single-threaded: tiny models, and the CI machine has 2 cores."""

import pytest


@pytest.fixture(autouse=True, scope="session")
def _single_thread():
    torch = pytest.importorskip("torch")
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
