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
