"""GNN's ``execute.jax`` functions as the wheel provides them: the seed README's
examples (paths adapted to a tree in ``tmp_path``), each function's return values,
and its error paths.

The seed README calls ``run_jax_scripts(pipeline_output_dir=...)``, a keyword the
seed's own signature never had (it raised TypeError); the folder is passed as the
first argument, ``rendered_simulators_dir``, here as in GNN's executor.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import time
from pathlib import Path

from jax_runner import (
    execute_jax_script,
    find_jax_scripts,
    is_jax_available,
    run_jax_scripts,
)


# --- The seed README's examples -------------------------------------------------


def test_readme_python_api_and_performance_metrics(
    tmp_path: Path, needs_python: str, write_script, bodies
) -> None:
    # "Python API" and "Complete Pipeline Execution": the whole pipeline output.
    out = tmp_path / "output"
    write_script(out / "gnn_rendered_simulators/jax/pomdp_solver.py", bodies["ok"])
    success = run_jax_scripts(out, recursive_search=True, verbose=True, device="cpu")
    assert success is True

    # "Output Directory Structure": results beside the rendered simulators.
    results = out / "execution_results" / "jax"
    assert (results / "pomdp_solver_results.json").is_file()
    assert (results / "execution_log.txt").is_file()

    # "Performance Metrics": both keys at the top level of the document.
    with open(results / "performance_metrics.json") as f:
        metrics = json.load(f)
    print(f"Average execution time: {metrics['avg_execution_time']}s")
    print(f"Memory usage: {metrics['peak_memory_mb']}MB")
    assert isinstance(metrics["avg_execution_time"], (int, float))
    assert isinstance(metrics["peak_memory_mb"], (int, float))
    assert metrics["avg_execution_time"] > 0
    assert metrics["peak_memory_mb"] > 0


def test_readme_individual_and_custom_execution(
    tmp_path: Path, needs_python: str, write_script, bodies
) -> None:
    # "Custom Execution": find in one jax/ folder, run those named like pomdp.
    jax_dir = tmp_path / "output/11_render_output/jax"
    write_script(jax_dir / "pomdp_agent.py", bodies["ok"])
    write_script(jax_dir / "other_model.py", bodies["bad"])
    scripts = find_jax_scripts(str(jax_dir) + "/", recursive=False)
    assert [s.name for s in scripts] == ["other_model.py", "pomdp_agent.py"]
    ran = {}
    for script in scripts:
        if "pomdp" in script.name:
            # The README asks for device="gpu"; CI has none, so the CPU here.
            ran[script.name] = execute_jax_script(script, verbose=True, device="cpu")
    assert ran == {"pomdp_agent.py": True}


def test_readme_debug_mode_logger(tmp_path: Path, write_script, caplog) -> None:
    # "Debug Mode" set the seed's logger to DEBUG; the wheel's logger is jax_runner.
    write_script(tmp_path / "m/jax/a.py", "print('a')\n")
    with caplog.at_level(logging.DEBUG, logger="jax_runner"):
        find_jax_scripts(tmp_path)
    assert any(
        r.name.startswith("jax_runner") and "running" in r.getMessage()
        for r in caplog.records
    ), caplog.text


# --- run_jax_scripts ----------------------------------------------------------


def test_run_missing_folder_is_true_as_in_the_seed(tmp_path: Path, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="jax_runner"):
        assert run_jax_scripts(tmp_path / "nowhere") is True
    assert "not found" in caplog.text


def test_run_without_scripts_is_true(tmp_path: Path, write_script) -> None:
    # Neither in a jax/ folder nor importing jax: not a script. Exit 3 → True.
    write_script(tmp_path / "out/tools/notes.py", "print('not jax')\n")
    assert run_jax_scripts(tmp_path / "out") is True


def test_run_with_a_failing_script_is_false(
    tmp_path: Path, needs_python: str, write_script, bodies, caplog
) -> None:
    out = tmp_path / "out"
    write_script(out / "m/jax/ok.py", bodies["ok"])
    write_script(out / "m/jax/bad.py", bodies["bad"])
    results = tmp_path / "exec"
    with caplog.at_level(logging.INFO, logger="jax_runner"):
        ok = run_jax_scripts(out, execution_output_dir=results, verbose=True)
    assert ok is False
    # execution_output_dir is where the results go.
    assert (results / "ok_results.json").is_file()
    bad = json.loads((results / "bad_results.json").read_text())
    assert bad["status"] == "failed"
    assert not (out / "execution_results").exists()
    # The binary's lines reach logging; a failed script's line at ERROR.
    assert any(
        r.levelno == logging.ERROR and "bad" in r.getMessage() for r in caplog.records
    ), caplog.text


def test_run_bad_option_is_false_with_the_runner_message(
    tmp_path: Path, write_script, caplog
) -> None:
    write_script(tmp_path / "out/m/jax/ok.py", "print('ok')\n")
    with caplog.at_level(logging.ERROR, logger="jax_runner"):
        assert run_jax_scripts(tmp_path / "out", device="banana") is False
    assert "banana" in caplog.text


# --- execute_jax_script --------------------------------------------------------


def test_execute_missing_script_is_false(tmp_path: Path) -> None:
    assert execute_jax_script(tmp_path / "m/jax/gone.py") is False


def test_execute_ok_writes_to_output_dir(
    tmp_path: Path, needs_python: str, write_script, bodies
) -> None:
    script = write_script(tmp_path / "m/jax/ok.py", bodies["ok"])
    logs = tmp_path / "logs_here"
    assert execute_jax_script(script, output_dir=logs) is True
    result = json.loads((logs / "ok_results.json").read_text())
    assert result["success"] is True
    assert "ok" in Path(result["stdout_log"]).read_text().splitlines()
    # The script's GNN_OUTPUT_DIR is its data folder under output_dir.
    assert (Path(result["data_dir"]) / "simulation_results.json").is_file()


def test_execute_without_output_dir_writes_beside_the_script(
    tmp_path: Path, needs_python: str, write_script, bodies
) -> None:
    script = write_script(tmp_path / "m/jax/ok.py", bodies["ok"])
    assert execute_jax_script(script) is True
    assert (script.parent / "execution_results/jax/ok_results.json").is_file()


def test_execute_failing_script_is_false(
    tmp_path: Path, needs_python: str, write_script, bodies
) -> None:
    script = write_script(tmp_path / "m/jax/bad.py", bodies["bad"])
    assert execute_jax_script(script) is False


def test_execute_timeout_is_false_and_quick(
    tmp_path: Path, needs_python: str, write_script, bodies
) -> None:
    script = write_script(tmp_path / "m/jax/hang.py", bodies["hang"])
    started = time.monotonic()
    assert execute_jax_script(script, timeout=2, output_dir=tmp_path / "r") is False
    # The script sleeps 60 s; the whole tree is stopped soon after 2 s.
    assert time.monotonic() - started < 40
    result = json.loads((tmp_path / "r/hang_results.json").read_text())
    assert result["status"] == "timed_out"


# --- find_jax_scripts ----------------------------------------------------------


def test_find_order_and_recursion(tmp_path: Path, write_script) -> None:
    base = tmp_path / "jax"
    for rel in ("b.py", "a.py", "deep/jax/c.py", "deep/helper.py"):
        write_script(base / rel, "print('x')\n")
    found = find_jax_scripts(base)
    assert all(p.is_absolute() for p in found)
    # Sorted by path; helper.py is neither in a jax/ folder nor importing jax.
    assert [p.relative_to(base.resolve()).as_posix() for p in found] == [
        "a.py",
        "b.py",
        "deep/jax/c.py",
    ]
    shallow = find_jax_scripts(base, recursive=False)
    assert [p.name for p in shallow] == ["a.py", "b.py"]


def test_find_takes_files_that_import_jax_anywhere(
    tmp_path: Path, write_script
) -> None:
    write_script(tmp_path / "models/solver.py", "import jax.numpy as jnp\n")
    write_script(tmp_path / "models/plain.py", "print('plain')\n")
    assert [p.name for p in find_jax_scripts(tmp_path)] == ["solver.py"]


def test_find_missing_folder_is_empty(tmp_path: Path) -> None:
    assert find_jax_scripts(tmp_path / "nowhere") == []


def test_find_empty_folder_is_empty(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    assert find_jax_scripts(tmp_path / "empty") == []


# --- is_jax_available ----------------------------------------------------------


def test_is_jax_available_answers_for_this_interpreter() -> None:
    available = is_jax_available()
    assert isinstance(available, bool)
    assert available == (importlib.util.find_spec("jax") is not None)
