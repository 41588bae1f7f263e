"""The typed Python API: :func:`run` runs jax-runner once and returns its results
as :class:`RunResult` and :class:`ScriptResult` values.

:func:`run` passes its arguments to ``jax-runner run`` and reads back what the binary
wrote: ``performance_metrics.json`` (schemas/metrics.schema.json) and each script's
``<id>_results.json`` (schemas/results.schema.json). Field names are the schemas'
own, but ``class``, which is ``class_`` here because it is a Python keyword. The
whole documents stay reachable as ``RunResult.metrics``, ``ScriptResult.raw`` (the
results file) and ``ScriptResult.line`` (the script's line in the metrics).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

from ._binary import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_NO_SCRIPTS,
    EXIT_OK,
    EXIT_USAGE,
    JaxRunnerError,
    duration_arg,
    error_message,
    logger,
    run_binary,
)

PathLike = Union[str, "os.PathLike[str]"]

# Options whose value "-" takes the binary's standard output: only one may have it.
_STDOUT_OPTIONS = (
    "--events",
    "--export-json",
    "--export-markdown",
    "--export-junit",
    "--export-csv",
)


def _path(value: Any, base: Path) -> Path:
    """A path from a results document; a relative one is taken from ``base``."""
    p = Path(str(value)) if value is not None else base
    return p if p.is_absolute() else base / p


@dataclass(frozen=True)
class ScriptResult:
    """One script of a run: its ``<id>_results.json`` and its metrics line.

    ``status`` is the metrics line's: ``succeeded``, ``failed``, ``timed_out``,
    ``interrupted``, ``skipped``, or ``carried`` for a script this run did not run
    (then ``carried_status`` is its standing record's status, ``carried_from`` the
    run that made it, and the other fields come from that record). A success that
    ``resume=True`` kept instead of running is ``succeeded`` with ``resumed`` set
    and ``resumed_from`` naming the run that ran it.
    """

    id: str
    status: str
    success: bool
    class_: str
    reason: Optional[str]
    return_code: Optional[int]
    execution_time_s: float
    peak_memory_mb: float
    device_used: Optional[str]
    relative_path: str
    script_path: Path
    stdout_log: Path
    stderr_log: Path
    data_dir: Path
    data_files: Tuple[str, ...]
    attempts: int
    run_id: str
    results_file: Path
    carried_from: Optional[str] = None
    carried_status: Optional[str] = None
    resumed: bool = False
    resumed_from: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False, hash=False)
    line: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False, hash=False)

    @property
    def carried(self) -> bool:
        """Not run by this run: an earlier run's record stands for it."""
        return self.status == "carried"

    @property
    def failed(self) -> bool:
        """It did not succeed: this run's failure, or a carried record still failing."""
        if self.carried:
            return self.carried_status != "succeeded"
        return self.status != "succeeded"

    @classmethod
    def from_documents(
        cls, record: Dict[str, Any], line: Dict[str, Any], results_dir: Path
    ) -> "ScriptResult":
        """Builds one from its results file and its metrics line."""
        script = record.get("script_path", "")
        if record.get("script_path_hex"):
            # Present only when the path is not UTF-8: its bytes give the real name.
            script = os.fsdecode(bytes.fromhex(record["script_path_hex"]))
        attempts = record.get("attempts", line.get("attempts", 0))
        return cls(
            id=str(record.get("id", line.get("id", ""))),
            status=str(line.get("status", record.get("status", ""))),
            success=bool(record.get("success", False)),
            class_=str(record.get("class", line.get("class", ""))),
            reason=record.get("reason", line.get("reason")),
            return_code=record.get("return_code"),
            execution_time_s=float(record.get("execution_time_s", 0.0)),
            peak_memory_mb=float(record.get("peak_memory_mb", 0.0)),
            device_used=record.get("device_used"),
            relative_path=str(record.get("relative_path", "")),
            script_path=Path(script),
            stdout_log=_path(record.get("stdout_log"), results_dir),
            stderr_log=_path(record.get("stderr_log"), results_dir),
            data_dir=_path(record.get("data_dir"), results_dir),
            data_files=tuple(str(f) for f in record.get("data_files", [])),
            attempts=len(attempts) if isinstance(attempts, list) else int(attempts),
            run_id=str(record.get("run_id", "")),
            results_file=results_dir / str(line.get("results_file", "")),
            carried_from=line.get("carried_from"),
            carried_status=line.get("carried_status"),
            resumed=bool(line.get("resumed", False)),
            resumed_from=record.get("resumed_from"),
            raw=record,
            line=line,
        )


@dataclass(frozen=True)
class RunResult:
    """One run of jax-runner: its exit code, metrics and scripts.

    ``exit_code`` is the binary's: 0 every script succeeded, 1 one failed (or a
    listed script is missing), 3 no script was found, 130 interrupted.
    """

    exit_code: int
    run_id: str
    results_dir: Path
    scripts: List[ScriptResult] = field(default_factory=list, hash=False)
    totals: Dict[str, Any] = field(default_factory=dict, repr=False, hash=False)
    metrics: Dict[str, Any] = field(default_factory=dict, repr=False, hash=False)

    @property
    def succeeded(self) -> List[ScriptResult]:
        """Scripts that succeeded: in this run, or carried with a standing success."""
        return [s for s in self.scripts if not s.failed]

    @property
    def failed(self) -> List[ScriptResult]:
        """Scripts that did not succeed: this run's failures, timeouts, interrupts
        and skips, and carried records still failing."""
        return [s for s in self.scripts if s.failed]

    @property
    def ok(self) -> bool:
        """True when nothing failed: exit code 0, or 3 (nothing found) with no
        carried record still failing."""
        return self.exit_code in (EXIT_OK, EXIT_NO_SCRIPTS) and not self.failed

    @property
    def missing_scripts(self) -> List[str]:
        """Scripts the render manifest lists that do not exist."""
        return list(self.metrics.get("missing_scripts", []))

    def get(self, script_id: str) -> Optional[ScriptResult]:
        """The script with this id, or None."""
        return next((s for s in self.scripts if s.id == script_id), None)


def _strings(values: Union[str, Iterable[str]]) -> List[str]:
    # A lone pattern is one pattern, not its characters.
    if isinstance(values, str):
        return [values]
    return [str(v) for v in values]


def _stdout_taken(extra: Sequence[str]) -> bool:
    """Whether the caller's own arguments already use standard output or
    ``--export-json``: then ``--export-json -`` cannot be added."""
    for i, arg in enumerate(extra):
        name, eq, value = arg.partition("=")
        if name == "--export-json":
            return True
        if name in _STDOUT_OPTIONS:
            given = value if eq else (extra[i + 1] if i + 1 < len(extra) else "")
            if given == "-":
                return True
    return False


def default_results_dir(output_dir: PathLike) -> Path:
    """Where jax-runner writes without ``--results-dir``: ``<tree>/execution_results/
    jax``, where the tree is ``output_dir``, or its parent when ``output_dir`` is
    GNN's render folder (named ``11_render_output`` or holding its manifest)."""
    out = Path(os.path.abspath(os.fspath(output_dir)))
    is_render = (
        out / "render_processing_summary.json"
    ).is_file() or out.name == "11_render_output"
    root = out.parent if is_render and out.parent != out else out
    return root / "execution_results" / "jax"


def _read_json(path: Path, code: int, stderr: str) -> Dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        raise JaxRunnerError(f"cannot read {path}: {e}", code, stderr) from e
    if not isinstance(doc, dict):
        raise JaxRunnerError(f"{path} does not hold a JSON object", code, stderr)
    return doc


def _exported(stdout: str) -> Optional[Dict[str, Any]]:
    """The metrics ``--export-json -`` printed, when stdout holds them."""
    try:
        doc = json.loads(stdout)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) and "run" in doc else None


def run(
    output_dir: PathLike,
    *,
    device: Optional[str] = None,
    jobs: Optional[int] = None,
    timeout: Optional[Union[int, float, str]] = None,
    select: Union[str, Sequence[str]] = (),
    exclude: Union[str, Sequence[str]] = (),
    resume: bool = False,
    results_dir: Optional[PathLike] = None,
    python: Optional[PathLike] = None,
    sandbox: Optional[str] = None,
    extra_args: Sequence[str] = (),
) -> RunResult:
    """Runs the JAX scripts under ``output_dir`` and returns what jax-runner wrote.

    Each argument is the option of the same name (``select`` is ``-k``, repeated;
    ``timeout`` in seconds, or a string such as ``"5m"``). ``None`` leaves the
    choice to jax-runner, its ``JAX_RUNNER_*`` variables and ``jax-runner.toml``;
    ``python=None`` lets it choose the interpreter (``JAX_RUNNER_PYTHON``,
    ``VIRTUAL_ENV``, ``python3``, its managed environment). ``extra_args`` go on
    the command line as given.

    Raises :class:`JaxRunnerError` for exit code 2 (a bad option, a missing
    folder, no usable Python) with the binary's message, and when the results
    cannot be read. Script failures are not errors: see ``RunResult.failed``.
    """
    args: List[str] = ["run", "--output-dir", os.fspath(output_dir)]
    if device is not None:
        args += ["--device", device]
    if jobs is not None:
        args += ["--jobs", str(jobs)]
    if timeout is not None:
        args += ["--timeout", duration_arg(timeout)]
    for pattern in _strings(select):
        args += ["-k", pattern]
    for pattern in _strings(exclude):
        args += ["--exclude", pattern]
    if resume:
        args.append("--resume")
    if results_dir is not None:
        args += ["--results-dir", os.fspath(results_dir)]
    if python is not None:
        args += ["--python", os.fspath(python)]
    if sandbox is not None:
        args += ["--sandbox", sandbox]
    extra = [os.fspath(a) for a in extra_args]
    if "--dry-run" in extra:
        raise ValueError("run() runs scripts; for a plan use `jax-runner --dry-run`")
    # The metrics on stdout say which results folder the run used, whatever set it
    # (an option, a JAX_RUNNER_RESULTS_DIR variable, a profile).
    export = not _stdout_taken(extra)
    if export:
        args += ["--export-json", "-"]
    args += extra

    code, out, err = run_binary(args, log=logger)
    if code == EXIT_USAGE:
        raise JaxRunnerError(error_message(err), code, err)
    if code not in (EXIT_OK, EXIT_FAILED, EXIT_NO_SCRIPTS, EXIT_INTERRUPTED):
        raise JaxRunnerError(
            f"jax-runner ended unexpectedly: {error_message(err)}", code, err
        )

    metrics = _exported(out) if export else None
    guessed = (
        Path(os.path.abspath(os.fspath(results_dir)))
        if results_dir is not None
        else default_results_dir(output_dir)
    )
    if metrics is None:
        metrics_file = guessed / "performance_metrics.json"
        if code == EXIT_NO_SCRIPTS and not metrics_file.is_file():
            # Nothing found and nothing to report: the runner removed the folder
            # it had made for this run.
            return RunResult(exit_code=code, run_id="", results_dir=guessed)
        metrics = _read_json(metrics_file, code, err)
    run_info = metrics.get("run", {})
    where = Path(run_info.get("results_dir") or guessed)
    scripts = [
        ScriptResult.from_documents(
            _read_json(where / str(line.get("results_file", "")), code, err),
            line,
            where,
        )
        for line in metrics.get("scripts", [])
        if isinstance(line, dict)
    ]
    return RunResult(
        exit_code=code,
        run_id=str(run_info.get("run_id", "")),
        results_dir=where,
        scripts=scripts,
        totals=dict(metrics.get("totals", {})),
        metrics=metrics,
    )
