"""Fixtures for the wheel's tests.

These tests run against the *installed* wheel, in a fresh virtual environment that
holds only the wheel and pytest: they import ``jax_runner`` from site-packages,
never from the repository, and build every pipeline tree in ``tmp_path``.

Running a script needs an interpreter that can import jax (jax-runner refuses an
explicit one without it). The tests take it from, in order:

- ``JAX_RUNNER_TEST_PYTHON``: a path (CI passes the managed environment's python),
  or ``managed``: ask ``jax-runner setup -q`` for it (builds the managed
  environment on first use, which downloads jax);
- ``JAX_RUNNER_PYTHON`` already set;
- this interpreter, when it can import jax.

Without one, the tests that run scripts are skipped, saying so; discovery, option
errors and ``--version`` need no interpreter and always run.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Callable, Iterator, Optional

import pytest

import jax_runner

TEST_PYTHON_ENV = "JAX_RUNNER_TEST_PYTHON"


def _managed_python() -> str:
    """The interpreter jax-runner's own managed environment provides."""
    out = subprocess.run(
        [str(jax_runner.binary()), "setup", "-q"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if out.returncode != 0:
        pytest.fail(f"jax-runner setup -q failed:\n{out.stderr}")
    return out.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="session")
def jax_python() -> Optional[str]:
    """The interpreter with jax that runs the tests' scripts, or None."""
    given = os.environ.get(TEST_PYTHON_ENV)
    if given == "managed":
        return _managed_python()
    if given:
        return given
    if os.environ.get("JAX_RUNNER_PYTHON"):
        return os.environ["JAX_RUNNER_PYTHON"]
    if importlib.util.find_spec("jax") is not None:
        return sys.executable
    return None


@pytest.fixture(autouse=True)
def _runner_env(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, jax_python: Optional[str]
) -> Iterator[None]:
    """Every test: the interpreter through JAX_RUNNER_PYTHON, and no stray config.

    The test-only variable is removed, because jax-runner warns about every
    ``JAX_RUNNER_*`` variable it does not know. The working folder is the test's
    own, so no ``./jax-runner.toml`` from wherever pytest started is read.
    """
    monkeypatch.delenv(TEST_PYTHON_ENV, raising=False)
    for name in ("JAX_RUNNER_CONFIG", "JAX_RUNNER_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    if jax_python:
        monkeypatch.setenv("JAX_RUNNER_PYTHON", jax_python)
    monkeypatch.chdir(tmp_path)
    yield


@pytest.fixture
def needs_python(jax_python: Optional[str]) -> str:
    """Skips a test that runs scripts when no interpreter with jax is known."""
    if not jax_python and os.environ.get("CI"):
        # CI provides one (.ci/python): a missing interpreter there is a failure,
        # never a quiet skip.
        pytest.fail(f"CI set, but no Python with jax: set {TEST_PYTHON_ENV}")
    if not jax_python:
        pytest.skip(
            f"no Python with jax: set {TEST_PYTHON_ENV} to one "
            f"(or to 'managed' to let `jax-runner setup` make it)"
        )
    return jax_python


@pytest.fixture
def write_script() -> Callable[[Path, str], Path]:
    """Writes a script (its text dedented) at a path, making its folders."""

    def write(path: Path, body: str) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(body).lstrip("\n"), encoding="utf-8")
        return path

    return write


# Script bodies shared by the test files. None imports jax: a *.py in a folder
# named jax is a script all the same, and these run in any interpreter.
OK_BODY = """
import json, os
print("ok")
with open(os.path.join(os.environ["GNN_OUTPUT_DIR"], "simulation_results.json"), "w") as f:
    json.dump({"beliefs": [[0.5, 0.5]], "actions": [0], "observations": [1], "num_timesteps": 1}, f)
"""

# The raise is on line 2: reasons name it as bad.py:2.
BAD_BODY = """
print("about to fail")
raise ValueError("deliberate failure")
"""
BAD_LINE = 2

# The sleep is on line 4, inside spin(): a timeout's reason names hang.py:4.
HANG_BODY = """
import time

def spin():
    time.sleep(60)

spin()
"""
HANG_LINE = 4


@pytest.fixture
def bodies() -> dict:
    """The shared script bodies, and the lines their reasons name."""
    return {
        "ok": OK_BODY,
        "bad": BAD_BODY,
        "hang": HANG_BODY,
        "bad_line": BAD_LINE,
        "hang_line": HANG_LINE,
    }
