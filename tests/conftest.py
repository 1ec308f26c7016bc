"""Process hygiene for the whole test run: the last defence against orphans.

At session start every process this pytest run will create is marked: ``P2P_GUARD_TEST_SESSION=<uuid>`` is put
in ``os.environ``, and children inherit it, down to hivemind's forked DHT process and its ``p2pd`` (hivemind
copies ``os.environ`` for the daemon), even those that started their own session or lost their parent.

- Around each test that starts processes, a process that appeared during the test and is still alive
  ``LINGER_S`` later (a descendant of pytest, or any process carrying the marker) is reported with a warning,
  then terminated and killed. Tests that start processes are those marked ``integration``, every test under
  ``tests/integration/`` (its ``conftest.py``), and any other test that requests the ``process_reaper``
  fixture (``@pytest.mark.usefixtures("process_reaper")``). Pure tests pay nothing: the scan reads every
  process's environment, twice per test.
- At the end of the session, every such process is terminated and killed (all tests, pure ones included).

Long-lived helpers of the pytest process itself (multiprocessing's resource tracker and forkserver, torch's
shared-memory manager) are left to the session sweep.
"""

from __future__ import annotations

import uuid
import warnings
from collections.abc import Iterator

import psutil
import pytest

from p2p_guard.simulation.processes import find_marked_processes, kill_processes

SESSION_ENV = "P2P_GUARD_TEST_SESSION"
_SESSION_HELPERS = ("resource_tracker", "forkserver", "torch_shm_manager")
LINGER_S = 2.0


class LeakedProcessWarning(UserWarning):
    """A test left a process running; the conftest reaper killed it."""


def _key(proc: psutil.Process) -> tuple[int, float] | None:
    """``(pid, create_time)`` of a live process, None if it is gone."""
    try:
        return proc.pid, proc.create_time()
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return None


def _live(proc: psutil.Process) -> bool:
    """True if the process runs (not a zombie)."""
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return False


def _session_helper(proc: psutil.Process) -> bool:
    """True for the pytest process's own long-lived helpers, which must outlive single tests."""
    try:
        cmdline = " ".join(proc.cmdline())
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return False
    return any(name in cmdline for name in _SESSION_HELPERS)


def _our_processes(marker: str) -> dict[tuple[int, float], psutil.Process]:
    """Live descendants of this pytest process and live processes carrying the session marker."""
    try:
        children = psutil.Process().children(recursive=True)
    except psutil.NoSuchProcess:
        children = []
    found = {}
    for proc in [*children, *find_marked_processes(marker, key=SESSION_ENV)]:
        key = _key(proc)
        if key is not None and _live(proc):
            found[key] = proc
    return found


@pytest.fixture(scope="session", autouse=True)
def session_process_reaper() -> Iterator[str]:
    """Mark every process of this test run; at the end, terminate then kill those still alive.

    Yields:
        The marker value of ``P2P_GUARD_TEST_SESSION``.
    """
    marker = uuid.uuid4().hex
    patch = pytest.MonkeyPatch()
    patch.setenv(SESSION_ENV, marker)
    try:
        yield marker
    finally:
        kill_processes(list(_our_processes(marker).values()))
        patch.undo()


@pytest.fixture(autouse=True)
def _reaper_for_integration_tests(request: pytest.FixtureRequest) -> None:
    """Put :func:`process_reaper` around every test marked ``integration`` (a marker lookup for the others)."""
    if request.node.get_closest_marker("integration") is not None:
        request.getfixturevalue("process_reaper")


@pytest.fixture
def process_reaper(session_process_reaper: str) -> Iterator[None]:
    """Kill (and warn about) any process that the test started and left running."""
    before = set(_our_processes(session_process_reaper))
    yield
    leaked = [
        proc
        for key, proc in _our_processes(session_process_reaper).items()
        if key not in before and not _session_helper(proc)
    ]
    _, leaked = psutil.wait_procs(leaked, timeout=LINGER_S)  # a daemon may still be on its way out
    leaked = [proc for proc in leaked if _live(proc)]
    if leaked:
        warnings.warn(
            f"test left {len(leaked)} processes running: {[p.pid for p in leaked]}; killing them",
            LeakedProcessWarning,
            stacklevel=1,
        )
        kill_processes(leaked)
