use super::Cli;
use clap::Parser;

#[test]
fn a_negative_duration_is_named_as_such() {
    for option in ["--timeout", "--grace", "--retry-delay"] {
        let err = Cli::try_parse_from(["jax-runner", option, "-5s"]).unwrap_err();
        assert_eq!(
            err.kind(),
            clap::error::ErrorKind::ValueValidation,
            "{option}"
        );
        let text = err.to_string();
        assert!(
            text.contains("must be positive") && text.contains(option),
            "{text}"
        );
    }
    assert!(Cli::try_parse_from(["jax-runner", "--timeout", "5s"]).is_ok());
}

#[test]
fn short_switches_and_fail_fast_values() {
    use jax_runner::config::FailFast;
    let run = |args: &[&str]| {
        let argv = std::iter::once("jax-runner").chain(args.iter().copied());
        Cli::try_parse_from(argv).unwrap().run
    };
    assert_eq!(run(&[]).fail_fast, FailFast::Off);
    assert_eq!(run(&["-x"]).fail_fast, FailFast::Wait);
    assert_eq!(run(&["--fail-fast"]).fail_fast, FailFast::Wait);
    assert_eq!(run(&["--fail-fast=now"]).fail_fast, FailFast::Now);
    assert_eq!(run(&["-x=now"]).fail_fast, FailFast::Now);
    assert!(run(&["--lf"]).rerun_failed);
    assert_eq!(run(&["--timeout", "90"]).timeout.as_secs(), 90);
    // `--fail-fast` takes its value only with `=`: what follows is a script.
    let r = run(&["--fail-fast", "a/jax/x.py", "-k", "y"]);
    assert_eq!(r.fail_fast, FailFast::Wait);
    assert_eq!(r.discover.scripts, ["a/jax/x.py"]);
    assert!(Cli::try_parse_from(["jax-runner", "--fail-fast=later"]).is_err());
    assert!(Cli::try_parse_from(["jax-runner", "-x", "--max-fail", "2"]).is_err());
}

#[test]
fn a_positional_that_names_a_command_is_the_command() {
    use super::Command;
    for (word, expect) in [("list", "list"), ("doctor", "doctor"), ("run", "run")] {
        let cli = Cli::try_parse_from(["jax-runner", word]).unwrap();
        let got = match cli.command {
            Some(Command::List(_)) => "list",
            Some(Command::Doctor(_)) => "doctor",
            Some(Command::Run(_)) => "run",
            _ => "none",
        };
        assert_eq!(got, expect, "{word}");
    }
    let cli = Cli::try_parse_from(["jax-runner", "out/a.py", "b.py"]).unwrap();
    assert!(cli.command.is_none());
    assert_eq!(cli.run.discover.scripts, ["out/a.py", "b.py"]);
    let cli = Cli::try_parse_from(["jax-runner", "run", "-x", "out/a.py"]).unwrap();
    let Some(Command::Run(run)) = cli.command else {
        panic!("run")
    };
    assert_eq!(run.discover.scripts, ["out/a.py"]);
    let cli = Cli::try_parse_from(["jax-runner", "list", "out/a.py"]).unwrap();
    let Some(Command::List(list)) = cli.command else {
        panic!("list")
    };
    assert_eq!(list.discover.scripts, ["out/a.py"]);
}
