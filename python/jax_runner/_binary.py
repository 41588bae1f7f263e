"""Find the bundled ``jax-runner`` executable and run it.

Everything the Python package does goes through the Rust binary: this module finds
it, runs it with an argument list (never a shell), forwards what it prints on
standard error to Python ``logging``, and hands back its exit code and output.
There is deliberately no second runner in Python: the binary owns discovery,
scheduling, sandboxing, time limits and every file it writes.

Where the binary is looked for, first match wins:

1. ``$JAX_RUNNER_BIN`` (a path; an error when it names nothing runnable);
2. ``<sysconfig "scripts" dir>/jax-runner``: where the wheel installs it (maturin
   ``bindings = "bin"`` puts the executable among the environment's scripts);
3. the user scheme's scripts dir (``pip install --user``);
4. ``jax-runner`` next to ``sys.executable`` (a venv used without activation);
5. ``shutil.which("jax-runner")`` (a ``cargo install``, a system package).

Logger name: GNN's seed module logged under ``logging.getLogger(__name__)``, i.e.
``execute.jax.jax_runner`` (its README says ``src.execute.jax``), names that
depend on how GNN put ``src`` on ``sys.path``. This package logs under the stable
name ``jax_runner`` instead (its modules under ``jax_runner.*``), so a handler or
level set on ``logging.getLogger("jax_runner")`` sees everything.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import threading
from pathlib import Path
from typing import IO, List, Optional, Sequence, Tuple, Union

LOGGER_NAME = "jax_runner"
logger = logging.getLogger(LOGGER_NAME)

BIN_ENV = "JAX_RUNNER_BIN"
EXE_NAME = "jax-runner"

# What the binary's own exit codes mean (docs/cli.md, "Exit codes").
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_NO_SCRIPTS = 3
EXIT_INTERRUPTED = 130

_INSTALL_HINT = (
    "install the wheel into this environment (`pip install jax-runner`; it runs on "
    "Linux x86_64), or set JAX_RUNNER_BIN to the path of a jax-runner executable"
)

# The binary colours nothing when stderr is a pipe, but a user's
# `--color always` in extra arguments or a profile must not reach log records.
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")

# The prefixes of the binary's log lines (its `CargoStyle` format: INFO has none).
_TAGS = (
    ("error:", logging.ERROR),
    ("warning:", logging.WARNING),
    ("debug:", logging.DEBUG),
    ("trace:", logging.DEBUG),
)
# The first word of the terminal reporter's per-script lines.
_WORDS = {
    "FAIL": logging.ERROR,
    "TIMEOUT": logging.ERROR,
    "SLOW": logging.WARNING,
    "SKIP": logging.WARNING,
}


class JaxRunnerError(RuntimeError):
    """jax-runner could not do what was asked: it is missing, or it exited with a
    usage or environment error (exit code 2), or its results could not be read.

    ``exit_code`` is the binary's exit code when it ran (``None`` when it never
    started); ``stderr`` is everything it printed on standard error.
    """

    def __init__(
        self, message: str, exit_code: Optional[int] = None, stderr: str = ""
    ) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code
        self.stderr = stderr

    def __str__(self) -> str:
        if self.exit_code is None:
            return self.message
        return f"{self.message} (jax-runner exit code {self.exit_code})"


def _runnable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _candidates() -> List[Path]:
    """Places the wheel or another install may have put the executable, in order."""
    found: List[Path] = []
    scripts = sysconfig.get_path("scripts")
    if scripts:
        found.append(Path(scripts) / EXE_NAME)
    try:
        # `pip install --user` puts console scripts in the user scheme's folder.
        user_scripts = sysconfig.get_path("scripts", f"{os.name}_user")
    except KeyError:
        user_scripts = None
    if user_scripts:
        found.append(Path(user_scripts) / EXE_NAME)
    if sys.executable:
        found.append(Path(sys.executable).parent / EXE_NAME)
    which = shutil.which(EXE_NAME)
    if which:
        found.append(Path(which))
    return found


def binary() -> Path:
    """The path of the ``jax-runner`` executable this package runs.

    Raises :class:`JaxRunnerError` when there is none, saying how to install it.
    Looked up on every call (it is cheap), so a changed ``JAX_RUNNER_BIN`` counts.
    """
    given = os.environ.get(BIN_ENV)
    if given:
        path = Path(given).expanduser()
        if _runnable(path):
            return path
        raise JaxRunnerError(
            f"{BIN_ENV}={given} is not an executable file: point it at jax-runner, "
            f"or unset it to use the one the wheel installed"
        )
    for path in _candidates():
        if _runnable(path):
            return path
    raise JaxRunnerError(f"the jax-runner executable was not found: {_INSTALL_HINT}")


def python_args() -> List[str]:
    """``--python <this interpreter>`` when it can import jax, else nothing.

    GNN's seed ran every script with ``sys.executable``, the pipeline's own
    interpreter; doing the same keeps the pipeline's packages in reach. When this
    interpreter lacks jax, jax-runner chooses (``JAX_RUNNER_PYTHON``,
    ``VIRTUAL_ENV``, ``python3`` on PATH, its managed environment). A
    ``JAX_RUNNER_PYTHON`` the user set is an explicit choice and is left to win.
    """
    if os.environ.get("JAX_RUNNER_PYTHON"):
        return []
    if sys.executable and importlib.util.find_spec("jax") is not None:
        return ["--python", sys.executable]
    return []


def duration_arg(seconds: Union[int, float, str]) -> str:
    """A time limit as ``--timeout`` takes it: ``300s`` for whole seconds, a bare
    ``2.5`` otherwise (humantime takes no fractions; jax-runner reads a bare number
    as seconds), or a string such as ``"5m"`` as given."""
    if isinstance(seconds, str):
        return seconds
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise TypeError(f"a time limit is a number of seconds, not {seconds!r}")
    if float(seconds).is_integer():
        return f"{int(seconds)}s"
    return repr(float(seconds))


def _level_and_text(line: str) -> Tuple[int, str]:
    """The logging level a line of the binary's stderr deserves, and its text."""
    text = _ANSI.sub("", line).rstrip()
    stripped = text.lstrip()
    for tag, level in _TAGS:
        if stripped.startswith(tag):
            return level, stripped[len(tag):].lstrip()
    first = stripped.split(" ", 1)[0]
    return _WORDS.get(first, logging.INFO), text


def _forward(stream: IO[str], sink: List[str], log: logging.Logger) -> None:
    """Reads the binary's stderr line by line as it comes, logging each line."""
    for line in stream:
        sink.append(line)
        if not line.strip():
            continue
        level, text = _level_and_text(line)
        log.log(level, "%s", text)


def _child_env() -> dict:
    env = dict(os.environ)
    # Ours, not the binary's: it would warn about an unknown JAX_RUNNER_ variable.
    env.pop(BIN_ENV, None)
    return env


def _stop(proc: "subprocess.Popen[str]") -> None:
    """After a KeyboardInterrupt here: let jax-runner stop its scripts itself.

    From a terminal the child got the same SIGINT and is already stopping them
    (its own grace is 10 s by default); a second signal would make it kill them
    at once, so wait first, then ask with SIGTERM, and only then kill.
    """
    for sig in (None, signal.SIGTERM, signal.SIGKILL):
        if sig is not None:
            try:
                proc.send_signal(sig)
            except OSError:
                return
        try:
            proc.wait(timeout=15)
            return
        except subprocess.TimeoutExpired:
            continue


def run_binary(
    args: Sequence[str],
    log: Optional[logging.Logger] = None,
    cwd: Optional[str] = None,
) -> Tuple[int, str, str]:
    """Runs ``jax-runner ARGS`` and waits for it.

    Standard error is streamed to ``log`` (the ``jax_runner`` logger by default)
    while the binary runs, one record per line, at the level its tag says
    (``error:``, ``warning:``, ``FAIL``, ...). Standard output is collected.
    Returns ``(returncode, stdout, stderr)``; raises :class:`JaxRunnerError` only
    when the binary is missing or cannot be started.
    """
    exe = binary()
    argv = [str(exe), *[os.fspath(a) for a in args]]
    log = log or logger
    log.debug("running %s", " ".join(argv))
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            errors="replace",
            env=_child_env(),
            cwd=cwd,
        )
    except OSError as e:
        raise JaxRunnerError(f"cannot start {exe}: {e}; {_INSTALL_HINT}") from e
    err_lines: List[str] = []
    assert proc.stdout is not None and proc.stderr is not None
    reader = threading.Thread(
        target=_forward, args=(proc.stderr, err_lines, log), daemon=True
    )
    reader.start()
    try:
        out = proc.stdout.read()
        code = proc.wait()
    except KeyboardInterrupt:
        _stop(proc)
        raise
    finally:
        reader.join(timeout=30)
        proc.stdout.close()
    return code, out, "".join(err_lines)


def error_message(stderr: str, fallback: str = "jax-runner failed") -> str:
    """The binary's own words for what went wrong: from its first ``error:`` line
    to the end (clap adds the possible values and a hint below it)."""
    lines = [_ANSI.sub("", s).rstrip() for s in stderr.splitlines()]
    for i, line in enumerate(lines):
        if line.lstrip().startswith("error:"):
            kept = [s for s in lines[i:] if s.strip()]
            kept[0] = kept[0].lstrip()[len("error:"):].strip()
            return "\n".join(kept)
    tail = [s for s in lines if s.strip()][-5:]
    return "\n".join(tail) if tail else fallback
