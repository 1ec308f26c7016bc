"""Which tests get the per-test process reaper of ``tests/conftest.py`` (it scans every process's environment)."""

from __future__ import annotations

import os

import pytest


def test_a_pure_test_gets_no_per_test_scan(request: pytest.FixtureRequest) -> None:
    assert "process_reaper" not in request.fixturenames
    assert os.environ["P2P_GUARD_TEST_SESSION"]  # the session marker is still set for every test


@pytest.mark.integration
def test_an_integration_test_gets_it(request: pytest.FixtureRequest) -> None:
    assert "process_reaper" in request.fixturenames


@pytest.mark.usefixtures("process_reaper")
def test_a_test_can_ask_for_it(request: pytest.FixtureRequest) -> None:
    assert "process_reaper" in request.fixturenames

