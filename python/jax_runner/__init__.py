"""jax-runner for Python: run the JAX scripts a GNN-style pipeline generates.

The wheel carries the ``jax-runner`` executable (Linux x86_64); this package runs
it. Two layers:

- GNN's ``execute.jax`` functions, same names, parameters, defaults and return
  values, as a drop-in replacement::

      from jax_runner import run_jax_scripts, execute_jax_script
      from jax_runner import find_jax_scripts, is_jax_available

      ok = run_jax_scripts("output/11_render_output",
                           execution_output_dir="output/12_execute_output/jax")

- the typed API::

      import jax_runner
      result = jax_runner.run("output", device="cpu", timeout=90)
      for script in result.failed:
          print(script.id, script.reason, script.stderr_log)

Everything is logged under the ``jax_runner`` logger. See docs/python.md.
"""

from __future__ import annotations

from ._binary import JaxRunnerError, binary
from .api import RunResult, ScriptResult, run
from .seed import (
    execute_jax_script,
    find_jax_scripts,
    is_jax_available,
    run_jax_scripts,
)


def _version() -> str:
    # The wheel's metadata is the one version source; a source checkout on
    # sys.path without an install has none.
    try:
        from importlib.metadata import PackageNotFoundError, version
    except ImportError:  # pragma: no cover - Python < 3.8
        return "0.1.0"
    try:
        return version("jax-runner")
    except PackageNotFoundError:
        return "0.1.0"


__version__ = _version()

__all__ = [
    "run_jax_scripts",
    "execute_jax_script",
    "find_jax_scripts",
    "is_jax_available",
    "run",
    "RunResult",
    "ScriptResult",
    "JaxRunnerError",
    "binary",
    "__version__",
]
