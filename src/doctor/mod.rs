//! `jax-runner doctor`: why JAX will or will not use each device, and the exact
//! command that fixes each problem. Runs use the same inspection once as their
//! pre-flight, so a broken GPU sends scripts to the CPU before any of them fails.

mod checks;
mod environment;
mod finding;
mod libs;
mod live;
pub mod render;
pub mod sandbox;

use crate::model::{Device, Platform};
use crate::python::Interpreter;

pub use finding::version_cmp;
// The report's types are the output contract's (`model::doctor`); these keep the
// `doctor::…` paths other code uses.
pub use crate::model::doctor::{
    DoctorReport, Finding, Host, LibraryDir, LiveCheck, PythonReport, Severity, Verdict,
};

/// Which backends to check live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Live {
    /// Every candidate backend (the `doctor` command).
    All,
    /// Only these (a run's pre-flight checks just the accelerator it may use).
    Only(&'static [Platform]),
}

// Reading a report is doctor behaviour; the type itself is data in `model::doctor`.
impl DoctorReport {
    /// The verdict for `device`.
    pub fn verdict(&self, device: Platform) -> Option<&Verdict> {
        self.verdicts.iter().find(|v| v.device == device)
    }

    /// Whether the requested device works (`auto`: any device).
    pub fn requested_works(&self) -> bool {
        match self.device_requested {
            Device::Auto => self.verdicts.iter().any(|v| v.works),
            Device::Cpu => self.verdict(Platform::Cpu).is_some_and(|v| v.works),
            Device::Gpu => self.verdict(Platform::Gpu).is_some_and(|v| v.works),
            Device::Tpu => self.verdict(Platform::Tpu).is_some_and(|v| v.works),
        }
    }

    /// Why `device` does not work, as one line: the first blocking finding.
    pub fn why_not(&self, device: Platform) -> Option<String> {
        let v = self.verdict(device)?;
        if v.works {
            return None;
        }
        let code = v.blocked_by.first()?;
        self.findings
            .iter()
            .find(|f| &f.code == code)
            .map(|f| f.message.clone())
    }
}

fn host() -> Host {
    let mut sys = sysinfo::System::new();
    sys.refresh_cpu_list(sysinfo::CpuRefreshKind::nothing());
    sys.refresh_memory();
    Host {
        cpu_model: sys
            .cpus()
            .first()
            .map(|c| c.brand().trim().to_string())
            .unwrap_or_default(),
        logical_cpus: sys.cpus().len(),
        physical_cores: sysinfo::System::physical_core_count(),
        memory_total_mb: sys.total_memory() as f64 / (1024.0 * 1024.0),
        memory_available_mb: sys.available_memory() as f64 / (1024.0 * 1024.0),
    }
}

/// Inspects the host, the driver, the interpreter and the environment, runs the
/// live checks asked for, and decides per device. The sandbox section is the doctor
/// command's ([`sandbox::inspect`]): a run's results say which layers it used.
pub fn inspect(
    interp: &Interpreter,
    device: Device,
    live: Live,
    parent: &crate::environment::Environment,
) -> DoctorReport {
    let nvml = crate::gpu::inspect();
    let env = checks::relevant_environment(parent);
    let libs = libs::scan_ld_library_path(parent.var_os("LD_LIBRARY_PATH"));
    let python = checks::python_report(interp, libs);
    let mut findings = checks::findings(interp, &python, &nvml, &env, device);
    let candidates = checks::candidate_platforms(&python, &nvml);
    let to_check: Vec<Platform> = candidates
        .iter()
        .copied()
        .filter(|p| match live {
            Live::All => true,
            Live::Only(list) => list.contains(p),
        })
        // A device already known not to work needs no live check.
        .filter(|p| !findings.iter().any(|f| f.blocks(*p)))
        .collect();
    let live_checks: Vec<LiveCheck> = to_check
        .iter()
        .map(|p| live::check(&interp.path, *p))
        .collect();
    for lc in &live_checks {
        if let Some(f) = checks::from_live(lc, &interp.path) {
            findings.push(f);
        }
    }
    let verdicts = [Platform::Cpu, Platform::Gpu, Platform::Tpu]
        .into_iter()
        .map(|device| {
            let blocked_by: Vec<String> = findings
                .iter()
                .filter(|f| f.blocks(device))
                .map(|f| f.code.clone())
                .collect();
            let live_ok = live_checks
                .iter()
                .find(|l| l.platform == device)
                .map(|l| l.ok);
            let candidate = candidates.contains(&device);
            Verdict {
                device,
                works: candidate && blocked_by.is_empty() && live_ok.unwrap_or(true),
                blocked_by,
            }
        })
        .collect();
    DoctorReport {
        schema_version: crate::model::SCHEMA_VERSION,
        device_requested: device,
        host: host(),
        nvml,
        python,
        environment: env,
        live: live_checks,
        findings,
        verdicts,
        sandbox: None,
    }
}
