//! The sandbox's one implementation: the last steps before a sandboxed script's first
//! line, as one record the runner makes for each attempt, and the Rust code that
//! applies it. Both live in the workspace's `jax-runner-confine` crate
//! (`crates/confine`): a cold start hands the record to `jax-runner __sandbox-exec`
//! in a memory file, and the warm zygote's children hand it to the same code, loaded
//! from that crate's library, which the binary carries inside itself
//! ([`super::bwrap::library`]). So no step of it is written twice, and a record that
//! code does not know is refused whole.

pub use jax_runner_confine::{Confinement, Phase};

#[cfg(test)]
mod tests {
    /// No step of the sandbox is written in Python: the zygote forks and hands the
    /// plan to this code (`crates/confine`, `ffi.rs`); it makes none of the calls that confine.
    #[test]
    fn the_zygote_holds_no_step_of_the_policy() {
        for (name, src) in [
            ("zygote.py", include_str!("../runner/zygote.py")),
            ("zygote_child.py", include_str!("../runner/zygote_child.py")),
            (
                "zygote_sandbox.py",
                include_str!("../runner/zygote_sandbox.py"),
            ),
            ("zygote_slot.py", include_str!("../runner/zygote_slot.py")),
        ] {
            for call in [
                ".mount",
                ".unshare",
                "setresuid",
                "setgroups",
                "capset",
                "landlock_",
                "LIBC.syscall",
                "prctl(22",
                "prctl(24",
                "prctl(38",
            ] {
                assert!(!src.contains(call), "{name} makes {call}");
            }
            assert!(
                src.contains("jax_runner_confine")
                    || name == "zygote.py"
                    || name == "zygote_child.py"
            );
        }
    }
}
