//! Renders POMDP model specifications into standalone JAX scripts from the templates
//! in `templates/`: the sample pipeline output and the benchmark workload come from
//! here, so they stay in step with the templates.

use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

/// A model specification (`templates/models/*.json`).
#[derive(Debug, Clone, Deserialize)]
pub struct ModelSpec {
    /// Template file name inside the templates folder.
    pub template: String,
    pub model_name: String,
    pub num_timesteps: u32,
    pub seed: u64,
    /// Likelihood p(o|s), `[num_obs][num_states]`.
    #[serde(rename = "A")]
    pub a: Value,
    /// Transitions p(s'|s,u), `[num_states][num_states][num_actions]`.
    #[serde(rename = "B")]
    pub b: Value,
    /// Log-preferences over observations.
    #[serde(rename = "C")]
    pub c: Value,
    /// Prior over states.
    #[serde(rename = "D")]
    pub d: Value,
}

/// Rendering failed.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("failed to read {path}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to parse model specification {path}")]
    Spec {
        path: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("model name {0:?} must be letters, digits, '_' or '-'")]
    Name(String),
    #[error("failed to render template {template}")]
    Template {
        template: String,
        #[source]
        source: minijinja::Error,
    },
}

/// Reads a model specification file.
pub fn load_spec(path: &Path) -> Result<ModelSpec, RenderError> {
    let text = std::fs::read_to_string(path).map_err(|source| RenderError::Read {
        path: path.display().to_string(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|source| RenderError::Spec {
        path: path.display().to_string(),
        source,
    })
}

/// Renders `spec` with its template from `templates_dir`.
pub fn render(templates_dir: &Path, spec: &ModelSpec) -> Result<String, RenderError> {
    // The name lands inside a Python string literal and a file name.
    let name_ok = !spec.model_name.is_empty()
        && spec
            .model_name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !name_ok {
        return Err(RenderError::Name(spec.model_name.clone()));
    }
    let path = templates_dir.join(&spec.template);
    let source = std::fs::read_to_string(&path).map_err(|source| RenderError::Read {
        path: path.display().to_string(),
        source,
    })?;
    let fail = |source| RenderError::Template {
        template: spec.template.clone(),
        source,
    };
    let mut env = minijinja::Environment::new();
    env.set_keep_trailing_newline(true);
    env.add_template_owned(spec.template.clone(), source)
        .map_err(fail)?;
    let compact = |v: &Value| serde_json::to_string(v).expect("JSON values serialize");
    env.get_template(&spec.template)
        .map_err(fail)?
        .render(minijinja::context! {
            model_name => spec.model_name,
            num_timesteps => spec.num_timesteps,
            seed => spec.seed,
            A => compact(&spec.a),
            B => compact(&spec.b),
            C => compact(&spec.c),
            D => compact(&spec.d),
        })
        .map_err(fail)
}

/// Renders `count` scripts for the benchmark workload into
/// `out/<model>_<i>/jax/<model>_<i>.py`, cycling through the model specifications in
/// `templates/models/` with a different seed each, so every script is its own program
/// text (the persistent cache still shares their compilations: same shapes).
pub fn render_workload(
    templates_dir: &Path,
    out: &Path,
    count: usize,
) -> Result<Vec<std::path::PathBuf>, RenderError> {
    let models_dir = templates_dir.join("models");
    let mut specs: Vec<std::path::PathBuf> = std::fs::read_dir(&models_dir)
        .map_err(|source| RenderError::Read {
            path: models_dir.display().to_string(),
            source,
        })?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    specs.sort();
    let specs: Vec<ModelSpec> = specs
        .iter()
        .map(|p| load_spec(p))
        .collect::<Result<_, _>>()?;
    let mut written = Vec::with_capacity(count);
    for i in 0..count {
        let mut spec = specs[i % specs.len()].clone();
        spec.model_name = format!("{}_{i:04}", spec.model_name);
        spec.seed += i as u64;
        let text = render(templates_dir, &spec)?;
        let dir = out.join(&spec.model_name).join("jax");
        let path = dir.join(format!("{}.py", spec.model_name));
        std::fs::create_dir_all(&dir)
            .and_then(|_| std::fs::write(&path, text))
            .map_err(|source| RenderError::Read {
                path: path.display().to_string(),
                source,
            })?;
        written.push(path);
    }
    Ok(written)
}
