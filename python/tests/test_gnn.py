"""GNN's step 12 through the wheel: a tree shaped like GNN's step-11 output, run the
way GNN's ``execute/executor.py`` calls ``run_jax_scripts``, then the files GNN's
step 16 reads from ``12_execute_output``.

GNN's executor calls::

    run_jax_scripts(rendered_simulators_dir=<output>/11_render_output,
                    execution_output_dir=<output>/12_execute_output/jax,
                    recursive_search=False, verbose=verbose)

``recursive_search`` is False there (``execute_rendered_simulators``' default): the
render manifest, not the walk, decides what runs in the render folder.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, Tuple

import pytest

from jax_runner import run_jax_scripts

# (model folder, script file name, body key): GNN names the folder after the GNN
# source file and the script after the model, spaces included.
MODELS: Tuple[Tuple[str, str, str], ...] = (
    ("actinf_pomdp_agent", "Active Inference POMDP Agent_jax.py", "ok"),
    ("broken_model", "Broken_jax.py", "bad"),
)


def render_tree(output: Path, write_script, bodies, models=MODELS) -> Path:
    """Writes GNN's step-11 output under ``output``: one ``<model>/jax/`` script per
    model and ``render_processing_summary.json`` keyed by GNN source path, with
    absolute ``output_files`` as GNN writes them."""
    render = output / "11_render_output"
    file_results: Dict[str, dict] = {}
    for model, script, body in models:
        dest = write_script(render / model / "jax" / script, bodies[body])
        file_results[f"input/gnn_files/{model}.md"] = {
            "overall_success": True,
            "framework_results": {
                "jax": {"success": True, "message": "ok", "output_files": [str(dest)]}
            },
        }
    manifest = {
        "processing_type": "POMDP-aware rendering",
        "file_results": file_results,
    }
    (render / "render_processing_summary.json").write_text(
        json.dumps(manifest, indent=2), encoding="utf-8"
    )
    return render


def step12(output: Path, recursive: bool = False) -> bool:
    """``run_jax_scripts`` with the arguments GNN's executor gives it."""
    return run_jax_scripts(
        rendered_simulators_dir=output / "11_render_output",
        execution_output_dir=output / "12_execute_output" / "jax",
        recursive_search=recursive,
        verbose=False,
    )


def test_step12_writes_what_step16_reads(
    tmp_path: Path, needs_python: str, write_script, bodies
) -> None:
    output = tmp_path / "output"
    render = render_tree(output, write_script, bodies)

    assert step12(output) is False, "one model fails"

    step12_dir = output / "12_execute_output"
    # jax-runner's own results where GNN's framework folder for jax is.
    assert (step12_dir / "jax" / "performance_metrics.json").is_file()
    # Nothing written inside the render folder.
    assert not (render / "execution_results").exists()
    assert not (render / "12_execute_output").exists()

    summary = json.loads(
        (step12_dir / "summaries" / "execution_summary.json").read_text()
    )
    assert summary["total_scripts_found"] == 2
    assert summary["successful_executions"] == 1
    assert summary["failed_executions"] == 1
    assert summary["success_rate"] == 50.0
    assert summary["success"] is False
    assert summary["framework_status"]["jax"]["status"] == "failed"
    details = {d["model_name"]: d for d in summary["execution_details"]}
    assert sorted(details) == ["actinf_pomdp_agent", "broken_model"]

    for model, script, body in MODELS:
        d = details[model]
        assert d["framework"] == "jax"
        assert d["script_name"] == script
        assert d["success"] is (body == "ok")
        implementation = step12_dir / model / "jax"
        assert Path(d["implementation_directory"]) == implementation.resolve()
        results_file = implementation / "execution_logs" / f"{script}_results.json"
        log_file = implementation / "execution_logs" / f"{script}_execution.log"
        assert Path(d["structured_result_file"]) == results_file.resolve()
        assert results_file.is_file() and log_file.is_file()
        doc = json.loads(results_file.read_text())
        assert doc["success"] is (body == "ok")
        assert "Return Code" in log_file.read_text()

    ok = details["actinf_pomdp_agent"]
    assert ok["error"] is None and ok["return_code"] == 0
    # One script in the model: its GNN_OUTPUT_DIR is simulation_data/ itself.
    sim = step12_dir / "actinf_pomdp_agent" / "jax" / "simulation_data"
    written = json.loads((sim / "simulation_results.json").read_text())
    assert written["num_timesteps"] == 1
    ok_doc = json.loads(Path(ok["structured_result_file"]).read_text())
    assert ok_doc["simulation_data"]["num_timesteps"] == 1
    assert ok_doc["simulation_data"]["beliefs"] == [[0.5, 0.5]]

    broken = details["broken_model"]
    assert broken["return_code"] == 1
    assert "return code 1" in broken["error"]
    assert broken["error_type"] is not None


def test_step12_all_ok_is_true(
    tmp_path: Path, needs_python: str, write_script, bodies
) -> None:
    output = tmp_path / "output"
    render_tree(output, write_script, bodies, models=MODELS[:1])
    assert step12(output) is True
    summary = json.loads(
        (output / "12_execute_output/summaries/execution_summary.json").read_text()
    )
    assert summary["success"] is True
    assert summary["successful_executions"] == 1


def test_step12_without_render_output_is_true(tmp_path: Path) -> None:
    # GNN's executor runs every framework; an output without step 11's folder has
    # nothing for jax: the seed said True, and so does the wheel.
    (tmp_path / "output").mkdir()
    assert step12(tmp_path / "output") is True


@pytest.mark.parametrize("recursive", [False, True])
def test_step12_runs_what_the_manifest_lists_either_way(
    tmp_path: Path, needs_python: str, write_script, bodies, recursive: bool
) -> None:
    output = tmp_path / "output"
    render_tree(output, write_script, bodies, models=MODELS[:1])
    # A stray file beside the models: not in the manifest, so never run.
    write_script(output / "11_render_output/stray/jax/Stray_jax.py", bodies["bad"])
    assert step12(output, recursive=recursive) is True
    metrics = json.loads(
        (output / "12_execute_output/jax/performance_metrics.json").read_text()
    )
    assert [s["id"] for s in metrics["scripts"]] == [
        "Active_Inference_POMDP_Agent_jax"
    ]
