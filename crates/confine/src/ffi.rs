//! The library's door for the warm zygote: the zygote (Python) loads this crate's
//! library (`libjax_runner_confine.so`, which jax-runner carries inside its binary
//! and writes into its cache folder) and, in each script's child,
//! calls [`jax_runner_confine`] with the attempt's [`Confinement`] as the runner built
//! it. The steps are then the very code a cold start runs (`Confinement::apply_phase`);
//! the zygote only says which phase, where its forks fall.

use std::io;

use crate::{Confinement, Phase};

/// The seccomp programs as the zygote holds them: each a native-endian `u32` length,
/// then that many bytes.
fn split_filters(mut blob: &[u8]) -> io::Result<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    while !blob.is_empty() {
        let bad = || io::Error::new(io::ErrorKind::InvalidData, "a cut seccomp program");
        let len: [u8; 4] = blob
            .get(..4)
            .ok_or_else(bad)?
            .try_into()
            .map_err(|_| bad())?;
        let len = u32::from_ne_bytes(len) as usize;
        let program = blob.get(4..4 + len).ok_or_else(bad)?;
        out.push(program.to_vec());
        blob = &blob[4 + len..];
    }
    Ok(out)
}

/// What one call does: the plan read whole (a step or field this build does not know
/// refuses it before anything is applied), then the phase applied.
fn confine(plan: &[u8], filters: &[u8], phase: u32) -> Result<(), String> {
    let phase = Phase::from_raw(phase).ok_or_else(|| format!("unknown phase {phase}"))?;
    let plan: Confinement =
        serde_json::from_slice(plan).map_err(|e| format!("failed to read the plan: {e}"))?;
    let filters = split_filters(filters).map_err(|e| format!("failed to read the filters: {e}"))?;
    plan.apply_phase(phase, &filters)
        .map_err(|(what, e)| format!("failed to {what}: {e}"))
}

/// Applies `phase` of the JSON [`Confinement`] at `plan` (`plan_len` bytes) to the
/// calling process, installing the seccomp programs at `filters` (see
/// `split_filters`). Returns 0, or -1 with the reason written, NUL-terminated and cut
/// to fit, into `err` (`err_len` bytes).
///
/// # Safety
///
/// `plan`, `filters` and `err` must point at that many readable (writable, for `err`)
/// bytes; the call changes the calling process's namespaces, mounts, ids and filters,
/// so it is made only in a child about to become a script.
#[no_mangle]
pub unsafe extern "C" fn jax_runner_confine(
    plan: *const u8,
    plan_len: usize,
    filters: *const u8,
    filters_len: usize,
    phase: u32,
    err: *mut u8,
    err_len: usize,
) -> i32 {
    let slice = |p: *const u8, n: usize| match n {
        0 => &[][..],
        // SAFETY: the caller promises `n` readable bytes at `p`.
        _ => unsafe { std::slice::from_raw_parts(p, n) },
    };
    let outcome = std::panic::catch_unwind(|| {
        confine(slice(plan, plan_len), slice(filters, filters_len), phase)
    })
    .unwrap_or_else(|_| Err("the confinement panicked".into()));
    match outcome {
        Ok(()) => 0,
        Err(message) => {
            if !err.is_null() && err_len > 0 {
                let n = message.len().min(err_len - 1);
                // SAFETY: the caller promises `err_len` writable bytes at `err`.
                unsafe {
                    std::ptr::copy_nonoverlapping(message.as_ptr(), err, n);
                    *err.add(n) = 0;
                }
            }
            -1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(plan: &[u8], phase: u32) -> (i32, String) {
        let mut err = [0u8; 256];
        // SAFETY: every pointer is to a live buffer of the length given.
        let rc = unsafe {
            jax_runner_confine(
                plan.as_ptr(),
                plan.len(),
                std::ptr::null(),
                0,
                phase,
                err.as_mut_ptr(),
                err.len(),
            )
        };
        let end = err.iter().position(|b| *b == 0).unwrap_or(err.len());
        (rc, String::from_utf8_lossy(&err[..end]).into_owned())
    }

    /// An unknown step, field or phase fails closed: nothing is applied, the caller
    /// hears why (in the calling test process itself: no step was taken).
    #[test]
    fn an_unknown_step_field_or_phase_fails_closed_before_any_step() {
        let unknown_step = br#"{"steps":[{"op":"unhide","path":"/"}],"own":[],"user":null,
            "landlock":null,"cwd":"/","parent":null}"#;
        let (rc, why) = call(unknown_step, Phase::Process as u32);
        assert_eq!(rc, -1);
        assert!(
            why.contains("unknown variant") && why.contains("unhide"),
            "{why}"
        );
        let unknown_field = br#"{"steps":[],"own":[],"user":null,"landlock":null,
            "cwd":"/","parent":null,"trust_me":true}"#;
        let (rc, why) = call(unknown_field, Phase::Process as u32);
        assert_eq!(rc, -1);
        assert!(why.contains("trust_me"), "{why}");
        let plan = serde_json::to_vec(&Confinement::default()).unwrap();
        let (rc, why) = call(&plan, 9);
        assert_eq!((rc, why.as_str()), (-1, "unknown phase 9"));
    }

    #[test]
    fn filters_travel_as_length_prefixed_programs() {
        let mut blob = Vec::new();
        for p in [&b"abcdefgh"[..], &[1u8; 16][..]] {
            blob.extend_from_slice(&(p.len() as u32).to_ne_bytes());
            blob.extend_from_slice(p);
        }
        let got = split_filters(&blob).unwrap();
        assert_eq!(got, vec![b"abcdefgh".to_vec(), vec![1u8; 16]]);
        assert!(split_filters(&blob[..blob.len() - 1]).is_err());
        assert!(split_filters(&[]).unwrap().is_empty());
    }
}
