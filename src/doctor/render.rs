//! The human form of the doctor report: short, aligned, ✓/✗ per device, and each
//! problem with its fix.

use std::fmt::Write;

use super::{DoctorReport, Severity};
use crate::model::doctor::{LayerState, SandboxReport};

fn mark(ok: bool) -> &'static str {
    if ok {
        "✓"
    } else {
        "✗"
    }
}

/// Renders the report for a terminal.
pub fn human(r: &DoctorReport) -> String {
    let mut s = String::new();
    machine_section(&mut s, r);
    python_section(&mut s, r);
    if let Some(sandbox) = &r.sandbox {
        sandbox_section(&mut s, sandbox);
    }
    verdict_section(&mut s, r);
    s
}

/// The host, the driver and the GPUs.
fn machine_section(s: &mut String, r: &DoctorReport) {
    let h = &r.host;
    let _ = writeln!(
        s,
        "Host      {} ({} logical CPUs{}), {:.1} GiB memory, {:.1} GiB available",
        if h.cpu_model.is_empty() {
            "unknown CPU"
        } else {
            &h.cpu_model
        },
        h.logical_cpus,
        h.physical_cores
            .map(|c| format!(", {c} cores"))
            .unwrap_or_default(),
        h.memory_total_mb / 1024.0,
        h.memory_available_mb / 1024.0
    );
    let n = &r.nvml;
    if n.available {
        let _ = writeln!(
            s,
            "Driver    NVIDIA {} (CUDA {})",
            n.driver_version.as_deref().unwrap_or("?"),
            n.cuda_driver_version.as_deref().unwrap_or("?")
        );
        for g in &n.gpus {
            let _ = writeln!(
                s,
                "GPU {:<5} {}, {:.0}/{:.0} MiB used, {}% busy, compute {}, {} process(es)",
                g.index,
                g.name,
                g.memory_used_mb,
                g.memory_total_mb,
                g.utilization_gpu_pct.map_or("?".into(), |u| u.to_string()),
                g.compute_capability.as_deref().unwrap_or("?"),
                g.processes.len()
            );
        }
    } else {
        let _ = writeln!(
            s,
            "Driver    none: {}",
            n.error.as_deref().unwrap_or("NVML unavailable")
        );
    }
    if let Some(c) = n.count_override {
        let _ = writeln!(
            s,
            "          GPU count overridden to {c} by JAX_RUNNER_GPU_COUNT"
        );
    }
}

/// The interpreter, its plugins and the live checks.
fn python_section(s: &mut String, r: &DoctorReport) {
    let p = &r.python;
    let _ = writeln!(
        s,
        "Python    {} {} (chosen by {})",
        p.interpreter, p.python_version, p.chosen_because
    );
    let _ = writeln!(
        s,
        "jax       {} / jaxlib {} {}",
        p.jax_version.as_deref().unwrap_or("missing"),
        p.jaxlib_version.as_deref().unwrap_or("missing"),
        mark(p.jax_jaxlib_compatible && p.jax_importable)
    );
    if !p.plugins.is_empty() {
        let list: Vec<String> = p.plugins.iter().map(|(k, v)| format!("{k} {v}")).collect();
        let _ = writeln!(s, "Plugins   {}", list.join(", "));
    }
    if let Some(c) = &p.cudnn_would_load {
        let _ = writeln!(s, "cuDNN     {c}");
    }
    for lc in &r.live {
        let _ = writeln!(
            s,
            "Live      {} {}: {}",
            mark(lc.ok),
            lc.platform.as_str(),
            if lc.ok {
                format!(
                    "ran on {} (init {:.2}s, total {:.2}s)",
                    lc.device.as_deref().unwrap_or("?"),
                    lc.init_s.unwrap_or(0.0),
                    lc.total_s
                )
            } else {
                lc.error.clone().unwrap_or_default()
            }
        );
    }
}

/// The layers a run here uses, then each layer's state and how to strengthen it.
fn sandbox_section(s: &mut String, r: &SandboxReport) {
    let layers = if r.layers.is_empty() {
        "none".to_string()
    } else {
        r.layers.join(", ")
    };
    let _ = writeln!(s, "\nSandbox   a run here uses: {layers}");
    for f in &r.findings {
        let mark = match f.state {
            LayerState::Active => "✓",
            LayerState::Partial => "~",
            LayerState::Missing => "✗",
            LayerState::Unused => "-",
        };
        let _ = writeln!(s, "  {mark} {:<15} {}", f.layer.as_str(), f.message);
        if let Some(fix) = &f.fix {
            let _ = writeln!(s, "    {:<15} strengthen: {fix}", "");
        }
    }
}

/// Per device: works or not, and the problems with their fixes.
fn verdict_section(s: &mut String, r: &DoctorReport) {
    let _ = writeln!(s);
    for v in &r.verdicts {
        let why = if v.works {
            String::from("works")
        } else {
            r.why_not(v.device).unwrap_or_else(|| "not checked".into())
        };
        let _ = writeln!(s, "{} {:<4} {why}", mark(v.works), v.device.as_str());
    }
    let problems: Vec<_> = r
        .findings
        .iter()
        // Errors without a fix are already explained on their device's line.
        .filter(|f| {
            f.severity == Severity::Warning || (f.severity == Severity::Error && f.fix.is_some())
        })
        .collect();
    if !problems.is_empty() {
        let _ = writeln!(s, "\nProblems");
        for f in problems {
            let tag = if f.severity == Severity::Error {
                "error"
            } else {
                "warn "
            };
            let _ = writeln!(s, "  {tag} [{}] {}", f.code, f.message);
            if let Some(fix) = &f.fix {
                let _ = writeln!(s, "        fix: {fix}");
            }
        }
    }
}
