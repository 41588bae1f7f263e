//! Nothing a script prints steers a terminal or a reader (issue 30): a script whose
//! exception sets the window title, writes the clipboard, erases its own `FAIL` line
//! for a green `PASS`, and holds a NUL and a right-to-left override, beside one whose
//! file name holds escape sequences. The terminal, `show`, `execution_report.md`,
//! the Markdown and CSV exports, `junit.xml`, `report.html` and the execution log show
//! the escaped text (`\x1b]52;…`); the script's stderr log and its JSON result keep
//! the bytes it wrote.

mod common;

use std::path::Path;

use assert_cmd::Command;
use common::*;

/// What the script's message holds, raw, that no shown text may: ESC, BEL, NUL and
/// U+202E (RIGHT-TO-LEFT OVERRIDE).
const RAW: [(&str, &[u8]); 4] = [
    ("ESC", b"\x1b"),
    ("BEL", b"\x07"),
    ("NUL", b"\x00"),
    ("U+202E", "\u{202e}".as_bytes()),
];

/// The clipboard write as every report shows it.
const SHOWN: &str = "\\x1b]52;c;cHduZWQ=\\x07";

/// The script with a control sequence in its file name.
const ODD_NAME: &str = "m/jax/odd\x1b[2Kname\x07.py";

fn find(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Fails naming each raw control in `text`, and unless `text` shows the escaped
/// clipboard write (when `escaped_form`).
fn check_shown(what: &str, text: &[u8], escaped_form: bool) {
    let lossy = String::from_utf8_lossy(text);
    for (name, raw) in RAW {
        assert!(!find(text, raw), "a raw {name} in {what}: {lossy:?}");
    }
    if escaped_form {
        assert!(
            lossy.contains(SHOWN),
            "{what} does not show {SHOWN}: {lossy}"
        );
    }
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

#[test]
fn script_text_is_shown_escaped_and_logged_raw() {
    let t = Tree::new();
    t.fixture("steers_terminal.py", "m/jax/steers.py");
    t.fixture("ok_plain.py", ODD_NAME);
    let exports = t.root().join("exports");
    std::fs::create_dir(&exports).unwrap();
    let out = t
        .cmd()
        .args(["--sandbox", "off", "--retries", "0", "--color", "never"])
        .arg("--export-markdown")
        .arg(exports.join("r.md"))
        .arg("--export-csv")
        .arg(exports.join("s.csv"))
        .output()
        .unwrap();
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    // The per-script lines (stderr), the failure list and the summary (stdout).
    check_shown("the run's stderr", &out.stderr, false);
    check_shown("the run's stdout", &out.stdout, true);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.lines()
            .any(|l| l.starts_with("   FAIL [") && l.contains("] steers: exit code 1")),
        "{said}"
    );

    let results = t.results_dir();
    for (what, path, escaped_form) in [
        (
            "execution_report.md",
            results.join("execution_report.md"),
            true,
        ),
        ("the Markdown export", exports.join("r.md"), true),
        ("the CSV export", exports.join("s.csv"), true),
        ("junit.xml", results.join("junit.xml"), true),
        ("report.html", results.join("report.html"), true),
        ("execution_log.txt", results.join("execution_log.txt"), true),
    ] {
        check_shown(what, &read(&path), escaped_form);
    }
    // The odd file name is shown escaped too.
    let md = String::from_utf8(read(&results.join("execution_report.md"))).unwrap();
    assert!(md.contains("odd\\x1b[2Kname\\x07.py"), "{md}");

    // `show` reads the run back and shows it the same way.
    let shown = Command::cargo_bin("jax-runner")
        .unwrap()
        .args(["show", "--color", "never", "--output-dir"])
        .arg(t.dir.path())
        .output()
        .unwrap();
    assert_eq!(code(&shown), 1, "{}", stderr(&shown));
    check_shown("show", &shown.stdout, true);
    check_shown("show's stderr", &shown.stderr, false);
    assert_eq!(shown.stdout, out.stdout);

    // The log keeps the script's bytes, and the JSON result its message.
    let log = read(&results.join("logs/steers.stderr.log"));
    for (name, raw) in RAW {
        assert!(find(&log, raw), "the stderr log lost its {name}");
    }
    assert!(find(&log, b"\x1b]52;c;cHduZWQ=\x07"));
    assert!(find(&log, b"\x1b[2K\r\x1b[32m   PASS"));
    let message = t.result("steers")["exception"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.contains("\x1b]0;owned title\x07") && message.contains("nul\0byte"),
        "{message:?}"
    );
}
