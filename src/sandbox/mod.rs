//! The sandbox: everything that decides, and then makes, what a sandboxed script may
//! see and do. Its map, one file each:
//!
//! - `layers.rs`: the layers a run gets on this machine, as `--sandbox` asks
//!   ([`layers::Sandboxing`]).
//! - `policy.rs`: builds each attempt's policy from the run's setup
//!   ([`policy::SandboxSetup`]): bwrap's arguments or the mount steps, Landlock's
//!   grants, and the [`apply::Confinement`] record.
//! - `view.rs`: what a script sees, as one list of mount steps ([`view::MountStep`]).
//! - `grants.rs`: what a script may read of the host; the view and Landlock both read it.
//! - `bwrap.rs`: bubblewrap: finding it, and the view as its arguments.
//! - `landlock.rs`: the Landlock layer: the kernel's ABI and the rules.
//! - `seccomp.rs`, `seccomp/`: the seccomp filters (the allow-list, the refusals, their
//!   compilation).
//! - `user.rs`: the sandbox user: who a script is on the host, never root.
//! - `apply.rs`: the [`apply::Confinement`] record, whose applying (in phases: the one
//!   implementation of the last steps before a script's first line, the view made
//!   without bwrap included) lives in the workspace's `jax-runner-confine` crate
//!   (`crates/confine`), with `jax_runner_confine`, its library's door for the warm
//!   zygote.
//! - `helper.rs`: `jax-runner __sandbox-exec`, the cold start's last step before exec.
//!
//! How a policy flows. Once per run, [`layers`] says which layers this machine gives,
//! [`user`] who the scripts are on the host, and [`seccomp`] writes the filters; the
//! run's *prepare* step (`app/prepare.rs`, `app/surroundings.rs`) gathers them into a
//! [`policy::SandboxSetup`]. For each attempt, [`policy`] cuts the attempt's policy
//! from it: the view ([`view`], from [`grants`]), bwrap's arguments ([`bwrap`]),
//! Landlock's rules ([`landlock`], from the same grants) and the
//! [`apply::Confinement`] record. [`apply`] then makes it, the filters included: cold
//! in [`helper`] (inside bwrap or in its place), warm in the zygote's child through
//! the confinement library the binary carries ([`bwrap::library`];
//! `runner/zygote_sandbox.py` calls it).

pub mod apply;
pub mod bwrap;
pub mod grants;
pub mod helper;
pub mod landlock;
pub mod layers;
pub mod policy;
pub mod seccomp;
pub mod user;
pub mod view;
