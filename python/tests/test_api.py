"""The typed API (``jax_runner.run``), its errors, the bundled executable, and the
small helpers that turn Python values into jax-runner's options."""

from __future__ import annotations

import json
import subprocess
import sysconfig
from pathlib import Path

import pytest

import jax_runner
from jax_runner import JaxRunnerError, RunResult, ScriptResult
from jax_runner._binary import duration_arg, error_message
from jax_runner.api import _stdout_taken, default_results_dir


@pytest.fixture
def mixed_tree(tmp_path: Path, write_script, bodies) -> Path:
    """One script that succeeds, one that raises, one that sleeps past its limit."""
    out = tmp_path / "out"
    write_script(out / "m/jax/ok.py", bodies["ok"])
    write_script(out / "m/jax/bad.py", bodies["bad"])
    write_script(out / "m/jax/hang.py", bodies["hang"])
    return out


def test_mixed_run_then_a_selection_carries_the_rest(
    mixed_tree: Path, needs_python: str, bodies
) -> None:
    result = jax_runner.run(mixed_tree, device="cpu", timeout=2)
    assert isinstance(result, RunResult)
    assert result.exit_code == 1
    assert result.ok is False
    assert result.results_dir == (mixed_tree / "execution_results/jax").resolve()
    # Discovery order: sorted by path.
    assert [s.id for s in result.scripts] == ["bad", "hang", "ok"]
    assert all(isinstance(s, ScriptResult) for s in result.scripts)
    assert [s.id for s in result.succeeded] == ["ok"]
    assert sorted(s.id for s in result.failed) == ["bad", "hang"]

    bad, hang, ok = (result.get(i) for i in ("bad", "hang", "ok"))
    assert bad is not None and hang is not None and ok is not None
    assert (bad.status, bad.class_, bad.success, bad.return_code) == (
        "failed",
        "script_error",
        False,
        1,
    )
    # The reason names the user's own line.
    assert f"bad.py:{bodies['bad_line']}" in bad.reason, bad.reason
    assert "ValueError" in bad.reason
    assert (hang.status, hang.class_) == ("timed_out", "timed_out")
    assert f"hang.py:{bodies['hang_line']}" in hang.reason, hang.reason
    for failed in (bad, hang):
        assert failed.stderr_log.is_file()
    assert "deliberate failure" in bad.stderr_log.read_text()

    assert ok.success and ok.return_code == 0 and ok.reason is None
    assert ok.attempts == 1
    assert ok.relative_path == "m/jax/ok.py"
    assert ok.script_path.resolve() == (mixed_tree / "m/jax/ok.py").resolve()
    assert ok.stdout_log.is_file()
    assert "simulation_results.json" in ok.data_files
    assert (ok.data_dir / "simulation_results.json").is_file()
    assert ok.results_file == result.results_dir / "ok_results.json"
    assert ok.raw["id"] == "ok" and ok.line["results_file"] == "ok_results.json"
    assert ok.execution_time_s > 0 and ok.peak_memory_mb >= 0

    assert result.run_id and result.run_id == result.metrics["run"]["run_id"]
    assert all(s.run_id == result.run_id for s in result.scripts)
    assert result.totals["succeeded"] == 1
    assert result.totals["timed_out"] == 1

    # A selection runs ok alone; the others' records stand, carried, still failing.
    again = jax_runner.run(mixed_tree, device="cpu", select="ok")
    assert again.run_id != result.run_id
    carried = {s.id: s for s in again.scripts if s.carried}
    assert sorted(carried) == ["bad", "hang"]
    assert carried["bad"].carried_status == "failed"
    assert carried["bad"].carried_from == result.run_id
    assert carried["bad"].run_id == result.run_id
    assert [s.id for s in again.succeeded] == ["ok"]
    assert sorted(s.id for s in again.failed) == ["bad", "hang"]
    assert again.ok is False


def test_resume_keeps_a_success(
    tmp_path: Path, needs_python: str, write_script, bodies
) -> None:
    out = tmp_path / "out"
    write_script(out / "m/jax/ok.py", bodies["ok"])
    first = jax_runner.run(out, device="cpu")
    assert first.exit_code == 0 and first.ok
    second = jax_runner.run(out, device="cpu", resume=True)
    kept = second.get("ok")
    assert kept is not None
    assert kept.status == "succeeded" and kept.resumed
    assert kept.resumed_from == first.run_id
    assert second.ok


def test_results_dir_and_exclude(
    tmp_path: Path, needs_python: str, write_script, bodies
) -> None:
    out = tmp_path / "out"
    write_script(out / "m/jax/ok.py", bodies["ok"])
    write_script(out / "m/jax/bad.py", bodies["bad"])
    elsewhere = tmp_path / "elsewhere"
    result = jax_runner.run(out, device="cpu", exclude=["bad"], results_dir=elsewhere)
    assert result.exit_code == 0
    assert result.results_dir == elsewhere.resolve()
    assert [s.id for s in result.scripts] == ["ok"]
    assert (elsewhere / "ok_results.json").is_file()
    assert not (out / "execution_results").exists()


def test_no_scripts_is_exit_3_and_ok(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    result = jax_runner.run(tmp_path / "out")
    assert result.exit_code == 3
    assert result.scripts == [] and result.failed == []
    assert result.ok


@pytest.mark.parametrize(
    "options, word",
    [({"device": "banana"}, "banana"), ({"jobs": 0}, "jobs")],
)
def test_bad_option_raises_with_exit_code_2(
    tmp_path: Path, write_script, options: dict, word: str
) -> None:
    write_script(tmp_path / "out/m/jax/ok.py", "print('ok')\n")
    with pytest.raises(JaxRunnerError) as caught:
        jax_runner.run(tmp_path / "out", **options)
    assert caught.value.exit_code == 2
    assert word in str(caught.value)
    assert word in caught.value.stderr


def test_missing_output_dir_raises(tmp_path: Path) -> None:
    with pytest.raises(JaxRunnerError) as caught:
        jax_runner.run(tmp_path / "nowhere")
    assert caught.value.exit_code == 2


def test_version_from_the_installed_executable() -> None:
    exe = Path(sysconfig.get_path("scripts")) / "jax-runner"
    assert exe.is_file(), f"the wheel installs {exe}"
    out = subprocess.run(
        [str(exe), "--version"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"jax-runner {jax_runner.__version__}"
    assert jax_runner.binary() == exe


def test_binary_honours_jax_runner_bin(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("JAX_RUNNER_BIN", str(tmp_path / "missing"))
    with pytest.raises(JaxRunnerError) as caught:
        jax_runner.binary()
    assert "JAX_RUNNER_BIN" in str(caught.value)
    real = Path(sysconfig.get_path("scripts")) / "jax-runner"
    monkeypatch.setenv("JAX_RUNNER_BIN", str(real))
    assert jax_runner.binary() == real


def test_metrics_are_a_plain_document(
    tmp_path: Path, needs_python: str, write_script, bodies
) -> None:
    out = tmp_path / "out"
    write_script(out / "m/jax/ok.py", bodies["ok"])
    result = jax_runner.run(out, device="cpu", extra_args=["-q"])
    on_disk = json.loads((result.results_dir / "performance_metrics.json").read_text())
    assert on_disk["run"]["run_id"] == result.run_id
    assert on_disk["scripts"] == result.metrics["scripts"]


# --- Helpers: no binary needed ---------------------------------------------------


def test_duration_arg() -> None:
    assert duration_arg(2) == "2s"
    assert duration_arg(90.0) == "90s"
    assert duration_arg(2.5) == "2.5"
    assert duration_arg("5m") == "5m"
    with pytest.raises(TypeError):
        duration_arg(True)


def test_error_message_keeps_the_runners_words() -> None:
    stderr = (
        "warning: something else\n"
        "error: invalid value 'banana' for '--device <DEVICE>'\n"
        "  [possible values: auto, cpu, gpu, tpu]\n"
    )
    message = error_message(stderr)
    assert message.startswith("invalid value 'banana'")
    assert "possible values" in message


def test_stdout_taken() -> None:
    assert _stdout_taken(["--events", "-"])
    assert _stdout_taken(["--export-csv=-"])
    assert _stdout_taken(["--export-json", "metrics.json"])
    assert not _stdout_taken(["--events", "events.ndjson", "-v"])


def test_default_results_dir(tmp_path: Path) -> None:
    out = tmp_path / "output"
    assert default_results_dir(out) == out / "execution_results/jax"
    render = out / "11_render_output"
    assert default_results_dir(render) == out / "execution_results/jax"
