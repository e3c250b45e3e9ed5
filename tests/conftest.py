"""Shared test configuration: hypothesis profiles for the CI budget, mypy in the background."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

# "ci": enough examples across the suite for thousands of configurations, inside the 10-minute
# budget on 2 cores: hypothesis' own default of 100 for a property test without settings of its
# own (150 before: a third of the time of the heaviest, an assignment against its reference rule,
# random packed corpora, bucket resumes), and what the fitting tests scale from. "dev": a deeper
# sweep (HYPOTHESIS_PROFILE=dev).
settings.register_profile(
    "ci", max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "dev", max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


# NOTE [ mypy in the background ]
# mypy --strict on a fresh checkout (no cache, as in CI) costs about a minute and a half of one
# core. So when the collection finishes with test_static_mypy_strict selected, mypy starts in its
# own process, beside the rest of the suite, and that test waits for its exit: the same command in
# the same folder, so the same verdict, in a fraction of the wall time. Nothing starts on
# --collect-only, and a mypy still running when pytest exits is killed.
#
# The suite runs under pytest-xdist (pyproject's addopts: two workers, CI's two cores). Every
# worker collects every test, but mypy must start once: so the controller starts it, when the
# first worker reports a collection with test_static_mypy_strict in it, and owns the process (the
# worker that runs the test may not be the one whose collection started it, and a worker that
# ends early must not take mypy with it). A thread of the controller waits for mypy's exit and
# writes the exit code beside the output, in a folder the controller named to every worker
# (workerinput); the test's worker waits for that file. Without xdist (-n 0, -p no:xdist) the one
# process starts mypy itself, as before. In both cases the fixture starts its own mypy if nothing
# was started (a test selected after the collection, e.g. by a plugin).
_ROOT = Path(__file__).resolve().parents[1]
_MYPY_TEST = "test_static_mypy_strict"
_MYPY_KEY = "dataorder_mypy_dir"  # workerinput: the controller's folder for mypy's output


@dataclasses.dataclass
class _Mypy:
    """The background mypy: its process, and the folder holding ``out`` and then ``rc``."""

    proc: subprocess.Popen[bytes]
    folder: Path
    waiter: threading.Thread


_STATE: dict[str, Any] = {}  # "mypy": a started _Mypy; "folder": the controller's folder


def _start_mypy(folder: Path) -> _Mypy:
    """Start mypy writing to ``folder/out``; a thread writes its exit code to ``folder/rc``."""
    folder.mkdir(parents=True, exist_ok=True)
    # `python -m mypy` at the lowest priority: it takes only the cycles the tests leave idle, so
    # it cannot slow a test that runs processes under a deadline (test_benchmarks_smoke's burst)
    nice = "os.nice(19)" if hasattr(os, "nice") else "None"
    run = f"import os, runpy; {nice}; runpy.run_module('mypy', run_name='__main__', alter_sys=True)"
    with open(folder / "out", "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c", run], cwd=_ROOT, stdout=out, stderr=subprocess.STDOUT
        )

    def wait() -> None:
        code = proc.wait()
        (folder / "rc.part").write_text(str(code))
        os.replace(folder / "rc.part", folder / "rc")  # whole, or absent

    waiter = threading.Thread(target=wait, name="mypy-in-the-background", daemon=True)
    waiter.start()
    return _Mypy(proc, folder, waiter)


def _folder() -> Path:
    if "folder" not in _STATE:
        _STATE["folder"] = Path(tempfile.mkdtemp(prefix="dataorder-mypy-"))
    return Path(_STATE["folder"])


def _start_once() -> None:
    if "mypy" not in _STATE:
        _STATE["mypy"] = _start_mypy(_folder())


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """xdist's controller, before a worker starts: name the folder mypy will write to."""
    node.workerinput[_MYPY_KEY] = str(_folder())


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node: Any, ids: list[str]) -> None:
    """xdist's controller, as each worker's collection arrives: start mypy once if selected."""
    if any(test_id.rpartition("::")[2] == _MYPY_TEST for test_id in ids):
        _start_once()


def pytest_collection_finish(session: pytest.Session) -> None:
    config = session.config
    if config.option.collectonly or hasattr(config, "workerinput"):
        return  # a worker: the controller starts mypy
    if any(item.name == _MYPY_TEST for item in session.items):
        _start_once()


def pytest_unconfigure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):
        return
    mypy = _STATE.pop("mypy", None)
    if mypy is not None:
        mypy.proc.kill()
        mypy.proc.wait()
        mypy.waiter.join(timeout=10)
    folder = _STATE.pop("folder", None)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def mypy_in_the_background(request: pytest.FixtureRequest) -> Iterator[tuple[int, str]]:
    """mypy's exit code and output; started at the end of the collection (or now)."""
    workerinput = getattr(request.config, "workerinput", None)
    if workerinput is not None and _MYPY_KEY in workerinput:
        folder = Path(workerinput[_MYPY_KEY])
        own = None if (folder / "out").exists() else _start_mypy(Path(tempfile.mkdtemp()))
    else:
        own = _STATE.get("mypy") or _start_mypy(Path(tempfile.mkdtemp()))
        _STATE.pop("mypy", None)
    if own is not None:
        folder = own.folder
    while not (folder / "rc").exists():  # pytest-timeout ends a wait that never ends
        time.sleep(0.2)
    yield int((folder / "rc").read_text()), (folder / "out").read_text(errors="replace")
    if own is not None:
        own.waiter.join(timeout=10)
        shutil.rmtree(own.folder, ignore_errors=True)


# NOTE [ xdist ]
# pyproject's addopts run the suite on two pytest-xdist workers (-n 2, CI's two cores) with
# --dist loadgroup: each test is its own unit of work, handed to whichever worker is free, except
# tests marked xdist_group(name), which one worker runs one after the other. What makes that safe:
# - a module whose tests share a module-scoped run (an example under torchrun, the benchmarks'
#   smoke runs) is one group; split over two workers, each would start that run again;
# - every multi-process job takes a port the OS picks (bind to port 0, torchrun --standalone,
#   a TCPStore or torchft's lighthouse on port 0), so two jobs at once do not collide;
# - each worker has its own tmp_path tree (--basetemp/gwN), and no test writes into the
#   repository or a fixed path outside it;
# - the hang guard of the hostile sweeps counts CPU time (tests/helpers/hang.py), so a call
#   that waits for a core is not called a hang; a multi-process deadline (pytest-timeout, the
#   job's own) is at least twice the job's run time alone (the other worker takes a core);
# - mypy starts once, in the controller (NOTE [ mypy in the background ]).
# The modules with multi-process tests, the heaviest of the suite, are moved to the front of the
# collection, whole and in their order (a stable sort, the same on every worker, as xdist
# requires; a module kept whole sets its module-scoped fixtures up once): the longest jobs start
# first, and the run ends on short tests instead of waiting for one long job on one worker.
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def module(item: pytest.Item) -> str:
        return item.nodeid.split("::")[0]

    heavy = {module(item) for item in items if item.get_closest_marker("multiprocess")}
    items.sort(key=lambda item: module(item) not in heavy)
