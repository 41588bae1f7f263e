//! Headless Chromium for the report.html tests: the DOM after the page's script ran,
//! screenshots, and the checks every rendered report shares.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::dom::{self, attr};

const CHROMIUM_TIMEOUT: Duration = Duration::from_secs(60);

/// The `chromium` binary on PATH, or why there is none.
fn find() -> Result<PathBuf, String> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join("chromium"))
        .find(|p| p.is_file())
        .ok_or_else(|| "`chromium` is not on PATH".to_string())
}

/// Whether `case` may run: headless Chromium is here. Its absence fails the test
/// rather than skipping it, unless `JAX_RUNNER_TEST_SKIP=chromium` (then `false`).
pub fn here(case: &str) -> bool {
    use crate::common::prereq;
    prereq::require(prereq::Prereq::Chromium, find().map(|_| ()), case)
}

/// The `chromium` binary on PATH; see [`here`].
pub fn chromium() -> PathBuf {
    find().unwrap_or_else(|e| panic!("{e}: call `chromium::here` first"))
}

/// What headless Chromium made of a page.
pub struct Rendered {
    dom: String,
    stderr: String,
}

/// Runs headless Chromium with `mode` (`--dump-dom`, `--screenshot=…`) on `page`
/// with `fragment` (`#q=…`) after its URL, killing it (by its own PID) if it runs
/// past the timeout.
pub fn headless(page: &Path, fragment: &str, mode: &[String]) -> Rendered {
    let scratch = tempfile::tempdir().unwrap();
    let profile = scratch.path().join("profile");
    let out_path = scratch.path().join("stdout");
    let err_path = scratch.path().join("stderr");
    // Files rather than pipes: a helper process that outlives the browser cannot
    // block the test by holding a pipe open.
    let mut child = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--no-first-run",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(mode)
        .arg(format!("file://{}{fragment}", page.display()))
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .expect("chromium starts");
    let deadline = Instant::now() + CHROMIUM_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "chromium did not finish within {CHROMIUM_TIMEOUT:?}; stderr:\n{}",
                std::fs::read_to_string(&err_path).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let rendered = Rendered {
        dom: String::from_utf8_lossy(&std::fs::read(&out_path).unwrap()).into_owned(),
        stderr: String::from_utf8_lossy(&std::fs::read(&err_path).unwrap()).into_owned(),
    };
    assert!(
        status.success(),
        "chromium exited with {status}; stderr:\n{}",
        rendered.stderr
    );
    rendered
}

/// Dumps the DOM after scripts ran and checks the console stayed clean.
pub fn dump_dom(page: &Path) -> String {
    dump_dom_at(page, "")
}

/// The same, with `fragment` after the page's URL.
pub fn dump_dom_at(page: &Path, fragment: &str) -> String {
    dump(page, fragment, &[])
}

/// The same, with more of Chromium's switches (`--window-size=1366,800`).
#[allow(dead_code)] // Used by the tests of html/lines.rs alone.
pub fn dump_dom_with(page: &Path, switches: &[String]) -> String {
    dump(page, "", switches)
}

fn dump(page: &Path, fragment: &str, switches: &[String]) -> String {
    let mut mode = vec!["--dump-dom".to_string()];
    mode.extend_from_slice(switches);
    let r = headless(page, fragment, &mode);
    for bad in ["Uncaught", "SyntaxError", "Content Security Policy"] {
        assert!(
            !r.stderr.contains(bad),
            "the page logged a JavaScript error ({bad}):\n{}",
            r.stderr
        );
    }
    r.dom
}

/// Screenshots `page` in a window `width` pixels wide into `png`, and checks it.
pub fn screenshot(page: &Path, fragment: &str, png: &Path, width: u32, height: u32) {
    headless(
        page,
        fragment,
        &[
            format!("--screenshot={}", png.display()),
            format!("--window-size={width},{height}"),
            "--hide-scrollbars".to_string(),
        ],
    );
    dom::assert_screenshot(png, width);
}

/// The `<body …>` start tag of a dumped DOM.
pub fn body_tag(dom: &str) -> &str {
    let start = dom.find("<body").expect("a body element");
    let end = start + dom[start..].find('>').unwrap();
    &dom[start..=end]
}

pub fn assert_rendered(dom: &str) {
    assert!(
        body_tag(dom).contains("data-rendered=\"ok\""),
        "the page's script did not finish: {}",
        body_tag(dom)
    );
    assert!(dom.contains("<svg"), "no SVG in the page");
    assert!(dom.contains("id=\"timeline\""), "no timeline");
    assert!(dom.contains("id=\"scripts\""), "no scripts table");
}

/// A worker runs one attempt at a time: bars sharing a row must not overlap.
pub fn assert_no_overlap_within_a_slot(dom: &str) {
    let bars: Vec<(f64, f64, f64)> = dom
        .match_indices("<rect class=\"attempt")
        .map(|(i, _)| {
            let tag = &dom[i..i + dom[i..].find('>').unwrap()];
            (
                attr(tag, "y"),
                attr(tag, "x"),
                attr(tag, "x") + attr(tag, "width"),
            )
        })
        .collect();
    for (i, a) in bars.iter().enumerate() {
        for b in &bars[i + 1..] {
            // Rounding to 0.1 unit and the 1.5-unit minimum width allow a hair.
            let overlap = a.1.max(b.1) + 2.0 < a.2.min(b.2);
            assert!(
                !(a.0 == b.0 && overlap),
                "attempts overlap in one slot: {a:?} and {b:?}"
            );
        }
    }
}
