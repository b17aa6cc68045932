"""Fixtures shared by the integration tests."""
import pytest

from xferd_harness import Daemon


@pytest.fixture
def daemon(tmp_path):
    """Make daemons on the simulated device; every one made is stopped at the end."""
    started = []

    def make(config, **kw):
        d = Daemon(tmp_path / f"d{len(started)}", config, **kw)
        started.append(d)
        return d

    yield make
    for d in started:
        d.stop()
