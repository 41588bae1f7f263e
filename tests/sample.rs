//! The committed sample pipeline output: it stays in step with the templates, and the
//! README's main command runs on it and writes the whole contract.

mod common;

#[cfg(feature = "integration")]
use std::path::Path;

use common::*;
use jax_runner::render;

const SAMPLE_JAX: &str = "output/gnn_rendered_simulators/jax";

/// Renders every model in `templates/models/` and fails when a committed script
/// differs; `INSTA_UPDATE=always` rewrites them (see `common::snapshot`).
#[test]
fn sample_scripts_are_rendered_from_the_templates() {
    let models = repo().join("templates/models");
    let mut names: Vec<_> = std::fs::read_dir(&models)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    names.sort();
    assert_eq!(names.len(), 3, "three model specifications");
    for spec_path in names {
        let spec = render::load_spec(&spec_path).unwrap();
        let rendered = render::render(&repo().join("templates"), &spec).unwrap();
        assert!(rendered.contains("import jax"));
        assert!(!rendered.contains("{{"), "every placeholder is filled");
        snapshot::assert_file(&format!("{SAMPLE_JAX}/{}.py", spec.model_name), &rendered);
    }
}

#[cfg(feature = "integration")]
#[test]
fn the_sample_runs_and_each_model_writes_its_simulation_results() {
    let t = Tree::new();
    copy_tree(&repo().join("output"), t.dir.path());
    let out = t.run(&[]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let m = t.metrics();
    assert_eq!(m["totals"]["total_scripts"], 3);
    assert_eq!(m["totals"]["succeeded"], 3);
    for id in ["combined_model", "general_model", "pomdp_solver"] {
        let r = t.result(id);
        assert_eq!(r["status"], "succeeded", "{id}: {r}");
        let sim =
            read_json(&Path::new(r["data_dir"].as_str().unwrap()).join("simulation_results.json"));
        assert_eq!(sim["model_name"], id);
        assert_eq!(sim["framework"], "jax");
        assert_eq!(sim["backend"], "cpu");
        let steps = sim["num_timesteps"].as_u64().unwrap() as usize;
        let beliefs = sim["beliefs"].as_array().unwrap();
        assert_eq!(beliefs.len(), steps, "{id}: one belief per step");
        for b in beliefs {
            let total: f64 = b
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p.as_f64().unwrap())
                .sum();
            assert!(
                (total - 1.0).abs() < 1e-3,
                "{id}: beliefs are distributions"
            );
        }
        assert_eq!(sim["expected_free_energy"].as_array().unwrap().len(), steps);
    }
}
