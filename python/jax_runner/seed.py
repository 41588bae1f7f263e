"""GNN's ``execute.jax`` functions, with the same names, parameters, defaults and
return values, each running the ``jax-runner`` binary.

These replace ``src/execute/jax/jax_runner.py`` of GeneralizedNotationNotation
(GNN). Facts about that seed module (read from GNN's source, commit a855550):

- ``run_jax_scripts(rendered_simulators_dir, execution_output_dir=None,
  recursive_search=True, verbose=False, device=None) -> bool``: returned False
  when jax was not importable in the current interpreter; only created
  ``execution_output_dir`` (nothing was written there); searched
  ``<rendered_simulators_dir>/jax`` alone; returned True when it found no
  script (a missing folder included) and otherwise True exactly when no script
  failed. It ran the scripts one after another with default ``timeout=300`` and
  without passing ``output_dir`` or ``device`` on to ``execute_jax_script``.
- ``execute_jax_script(script_path, verbose=False, device=None, output_dir=None,
  timeout=300) -> bool``: False for a missing script, for jax or numpy missing in
  the current interpreter, a syntax error, a non-zero exit, a timeout or any
  exception; ran ``[sys.executable, <absolute script>]`` with the script's folder
  as working directory, ``JAX_PLATFORM_NAME=<device>`` and, with ``output_dir``,
  ``JAX_OUTPUT_DIR=<output_dir>``; wrote ``stdout.txt``, ``stderr.txt`` and
  ``execution_log.json`` into ``output_dir`` or else the script's own folder.
- ``find_jax_scripts(base_dir, recursive=True) -> List[Path]``: ``[]`` with a
  warning for a missing folder; ``**/*.py`` (or ``*.py``) files whose name
  contains "jax" (any case) or whose folder is named ``jax``, in ``glob`` order
  (unsorted), paths as ``base_dir`` spelled them.
- ``is_jax_available() -> bool``: ``import jax``; logs its version and devices
  and returns True; False (logged as an error) when the import fails.
- The module logged under ``logging.getLogger(__name__)``; this one logs under
  ``jax_runner`` (see ``_binary``).
- GNN's step 12 (``execute/executor.py``) calls
  ``run_jax_scripts(rendered_simulators_dir=<target_dir, usually
  output/11_render_output>, execution_output_dir=<output>/12_execute_output/jax,
  recursive_search=<recursive, False by default>, verbose=<verbose>)``.

What jax-runner does differently is listed in docs/python.md; the main points are
said where each function maps its arguments.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
from pathlib import Path
from typing import Any, List, Optional, Union

from ._binary import (
    EXIT_NO_SCRIPTS,
    EXIT_OK,
    EXIT_USAGE,
    JaxRunnerError,
    duration_arg,
    error_message,
    python_args,
    run_binary,
)

logger = logging.getLogger("jax_runner")


def _verbosity(verbose: bool) -> str:
    # The seed logged every script at INFO; jax-runner's -q keeps warnings and
    # errors and leaves the summary on stdout, -v adds each start and a table.
    return "-v" if verbose else "-q"


def _report(code: int, stdout: str, stderr: str, what: str) -> None:
    """Logs the run's summary line (stdout), at ERROR when a script failed, and a
    usage or environment error (exit 2) in the binary's own words.

    The seed logged a summary ("N succeeded, M failed"); with ``-q`` jax-runner
    prints only its summary line, on stdout, so that line is what reaches logging.
    """
    level = logging.ERROR if code == 1 else logging.INFO
    for line in stdout.splitlines():
        if line.strip():
            logger.log(level, "%s", line.strip())
    if code == EXIT_USAGE:
        logger.error("%s: %s", what, error_message(stderr))
    elif code not in (EXIT_OK, 1, EXIT_NO_SCRIPTS):
        logger.error("%s: jax-runner exited with code %d", what, code)


def run_jax_scripts(
    rendered_simulators_dir: Union[str, Path],
    execution_output_dir: Optional[Union[str, Path]] = None,
    recursive_search: bool = True,
    verbose: bool = False,
    device: Optional[str] = None,
) -> bool:
    """Find and run the JAX scripts under ``rendered_simulators_dir``.

    Runs ``jax-runner run --output-dir <rendered_simulators_dir> [--results-dir
    <execution_output_dir>] [--no-recursive] [--device <device>] (-v|-q)``.
    Returns True when every script succeeded or none was found (exit 0 or 3, and
    a missing folder, as the seed); False when a script failed (1), on a usage or
    environment error (2, logged as an error) or an interrupt (130).

    Results go to ``execution_output_dir`` when given (the seed only created
    it), else to jax-runner's default ``<tree>/execution_results/jax/`` (the seed
    wrote logs beside each script). The whole tree is searched, not only its
    ``jax/`` folder, and on a GNN render folder the step-12 layout is written.
    """
    root = Path(rendered_simulators_dir)
    if not root.is_dir():
        # The seed's find_jax_scripts warned and found nothing, and "no scripts" is
        # a success for it; jax-runner would call a missing folder a usage error.
        logger.warning("Directory not found: %s", root)
        logger.info("No JAX scripts found")
        return True
    # `run` spelled out: the same as the bare command, and a path can never be
    # taken for a subcommand's name.
    args: List[str] = ["run", "--output-dir", str(root)]
    if execution_output_dir is not None:
        args += ["--results-dir", str(Path(execution_output_dir))]
    if not recursive_search:
        args.append("--no-recursive")
    if device:
        args += ["--device", device]
    args += python_args()
    args.append(_verbosity(verbose))
    try:
        code, out, err = run_binary(args, log=logger)
    except JaxRunnerError as e:
        logger.error("JAX scripts not run: %s", e)
        return False
    _report(code, out, err, "JAX script execution failed")
    if code == EXIT_NO_SCRIPTS:
        logger.info("No JAX scripts found")
        return True
    return code == EXIT_OK


def execute_jax_script(
    script_path: Union[str, Path],
    verbose: bool = False,
    device: Optional[str] = None,
    output_dir: Optional[Union[str, Path]] = None,
    timeout: Optional[Union[int, float]] = 300,
) -> bool:
    """Run one JAX script; True exactly when it exited 0 within ``timeout`` s.

    Runs ``jax-runner run --output-dir <script's folder> --no-recursive
    --timeout <timeout>s [--results-dir <output_dir>] [--device <device>] (-v|-q)
    -- <script>``. Its logs go to ``<output_dir>/logs/<id>.stdout.log`` (and
    ``.stderr.log``) with the result in ``<output_dir>/<id>_results.json``; without
    ``output_dir``, to ``<script's folder>/execution_results/jax/``. The script's
    ``JAX_OUTPUT_DIR`` and ``GNN_OUTPUT_DIR`` are its data folder there. A timeout
    stops the script's whole process tree (the seed left children running).
    """
    path = Path(script_path)
    if not path.is_file():
        logger.error("Script file not found: %s", path)
        return False
    path = path.resolve()
    args: List[str] = [
        "run",
        "--output-dir",
        str(path.parent),
        "--no-recursive",
    ]
    if timeout is not None:
        # None meant "no limit" to the seed's subprocess.run; jax-runner always has
        # one, and its default (30m) is the nearest thing.
        args += ["--timeout", duration_arg(timeout)]
    if output_dir is not None:
        args += ["--results-dir", str(Path(output_dir))]
    if device:
        args += ["--device", device]
    args += python_args()
    args.append(_verbosity(verbose))
    # The script last, after "--": a file name starting with "-" stays a path.
    args += ["--", str(path)]
    logger.info("Executing JAX script: %s", path)
    try:
        code, out, err = run_binary(args, log=logger)
    except JaxRunnerError as e:
        logger.error("Error executing script %s: %s", path.name, e)
        return False
    _report(code, out, err, f"Script {path.name} not run")
    if code == EXIT_NO_SCRIPTS:
        # jax-runner runs *.py files in a folder named jax or that import jax; the
        # seed ran whatever it was given.
        logger.error(
            "%s is not a JAX script to jax-runner: put it in a folder named jax, "
            "or import jax in it",
            path,
        )
    return code == EXIT_OK


def _listed_path(entry: Any) -> Optional[Path]:
    """A script's absolute path from one ``list --json`` entry."""
    if not isinstance(entry, dict):
        return None
    raw_hex = entry.get("path_hex")
    if isinstance(raw_hex, str) and raw_hex:
        # Set only when the path is not UTF-8: the raw bytes give the real name back.
        return Path(os.fsdecode(bytes.fromhex(raw_hex)))
    path = entry.get("path")
    return Path(path) if isinstance(path, str) else None


def find_jax_scripts(
    base_dir: Union[str, Path], recursive: bool = True
) -> List[Path]:
    """The JAX scripts under ``base_dir``, as jax-runner would run them.

    Runs ``jax-runner list --output-dir <base_dir> --json [--no-recursive]`` and
    returns the listed scripts' absolute paths in its order (sorted by path, the
    same every time). A missing folder gives ``[]`` with a warning, as the seed.
    jax-runner's rule differs from the seed's name test: a ``*.py`` in a folder
    named ``jax``, or one that imports jax, or one GNN's render manifest lists.
    """
    root = Path(base_dir)
    if not root.is_dir():
        logger.warning("Directory not found: %s", root)
        return []
    args = ["list", "--output-dir", str(root), "--json"]
    if not recursive:
        args.append("--no-recursive")
    try:
        code, out, err = run_binary(args, log=logger)
    except JaxRunnerError as e:
        logger.error("JAX scripts not listed: %s", e)
        return []
    if code not in (EXIT_OK, EXIT_NO_SCRIPTS):
        logger.error("JAX scripts not listed: %s", error_message(err))
        return []
    try:
        doc = json.loads(out)
    except ValueError as e:
        logger.error("jax-runner list --json printed no JSON document: %s", e)
        return []
    scripts = doc.get("scripts", []) if isinstance(doc, dict) else []
    found = [p for p in (_listed_path(s) for s in scripts) if p is not None]
    return found


def is_jax_available() -> bool:
    """Whether this interpreter can import jax (logging its version and devices).

    The one function that does not run the binary: as in the seed, it answers for
    the current interpreter. jax-runner itself can run scripts without jax here,
    with another interpreter; ``jax-runner doctor`` says which and why.
    """
    try:
        jax = importlib.import_module("jax")
    except ImportError as e:
        logger.error("JAX not available: %s", e)
        return False
    except Exception as e:  # a broken install raises more than ImportError
        logger.error("Error checking JAX: %s", e)
        return False
    version = getattr(jax, "__version__", None)
    if version is None:
        try:
            version = importlib.import_module("jaxlib").__version__
        except Exception:
            version = "unknown"
    logger.info("JAX version: %s", version)
    try:
        devices = jax.devices()
        logger.info("JAX devices: %s", [str(d) for d in devices])
    except Exception as e:
        logger.warning("Could not get JAX devices: %s", e)
    return True
