//! `--xla-preset`: XLA flags and jax settings for speed (`perf`) or bit-for-bit
//! repeatable GPU results (`deterministic`), merged into the user's own `XLA_FLAGS`
//! rather than replacing them.

use crate::model::XlaPreset;

/// The preset's `XLA_FLAGS` entries and other variables.
pub fn preset(
    p: XlaPreset,
) -> (
    &'static [&'static str],
    &'static [(&'static str, &'static str)],
) {
    match p {
        XlaPreset::Perf => (
            &[
                "--xla_gpu_triton_gemm_any=True",
                "--xla_gpu_enable_latency_hiding_scheduler=true",
            ],
            // Profile-guided latency estimates for the scheduler above.
            &[("JAX_ENABLE_PGLE", "true")],
        ),
        XlaPreset::Deterministic => (&["--xla_gpu_deterministic_ops=true"], &[]),
    }
}

/// The merge of a preset into the user's settings.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Merged {
    /// Variables to set.
    pub vars: Vec<(&'static str, String)>,
    /// Where the user's own value won over the preset's, in words.
    pub conflicts: Vec<String>,
}

/// Merges preset `p` into the user's `XLA_FLAGS` (`user_flags`) and reads the user's
/// other variables with `user_var`: the user's flags stay, the preset's are added,
/// and where both set one flag or variable the user's value wins.
pub fn merge(
    p: XlaPreset,
    user_flags: Option<&str>,
    user_var: impl Fn(&str) -> Option<String>,
) -> Merged {
    let (flags, vars) = preset(p);
    let user: Vec<&str> = user_flags.unwrap_or("").split_whitespace().collect();
    let name = |f: &str| f.split('=').next().unwrap_or(f).to_string();
    let mut merged: Vec<String> = user.iter().map(|f| f.to_string()).collect();
    let mut out = Merged::default();
    for flag in flags {
        match user.iter().find(|u| name(u) == name(flag)) {
            Some(u) if u != flag => out.conflicts.push(format!(
                "XLA_FLAGS sets {u}, which wins over --xla-preset {}'s {flag}",
                p.as_str()
            )),
            Some(_) => {}
            None => merged.push(flag.to_string()),
        }
    }
    out.vars.push(("XLA_FLAGS", merged.join(" ")));
    for (k, v) in vars {
        match user_var(k) {
            Some(u) if u != *v => out.conflicts.push(format!(
                "{k}={u} is set, which wins over --xla-preset {}'s {k}={v}",
                p.as_str()
            )),
            Some(_) => {}
            None => out.vars.push((k, v.to_string())),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_add_their_flags_to_the_users_and_the_user_wins_conflicts() {
        let none = |_: &str| None;
        let m = merge(XlaPreset::Perf, None, none);
        assert_eq!(
            m.vars,
            vec![
                (
                    "XLA_FLAGS",
                    "--xla_gpu_triton_gemm_any=True --xla_gpu_enable_latency_hiding_scheduler=true"
                        .to_string()
                ),
                ("JAX_ENABLE_PGLE", "true".to_string()),
            ]
        );
        assert!(m.conflicts.is_empty());
        let m = merge(
            XlaPreset::Perf,
            Some("--xla_dump_to=/tmp/d --xla_gpu_triton_gemm_any=False"),
            |k| (k == "JAX_ENABLE_PGLE").then(|| "false".to_string()),
        );
        assert_eq!(
            m.vars,
            vec![("XLA_FLAGS", "--xla_dump_to=/tmp/d --xla_gpu_triton_gemm_any=False --xla_gpu_enable_latency_hiding_scheduler=true".to_string())]
        );
        assert_eq!(m.conflicts.len(), 2, "{:?}", m.conflicts);
        assert!(m.conflicts[0].contains("--xla_gpu_triton_gemm_any=False, which wins"));
        let m = merge(
            XlaPreset::Deterministic,
            Some("--xla_gpu_deterministic_ops=true"),
            none,
        );
        assert_eq!(
            m.vars,
            vec![("XLA_FLAGS", "--xla_gpu_deterministic_ops=true".to_string())]
        );
        assert!(m.conflicts.is_empty(), "the same value is no conflict");
    }
}
