//! The return block: framing, decoding, and an unpacker that keeps to its folder.

use super::*;
use std::io::Write;

fn encode(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// A return archive with a report, two streams and the given data entries.
fn archive(entries: &[(&str, &[u8])], symlink: Option<(&str, &str)>) -> Vec<u8> {
    let mut z = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let opts = zip::write::SimpleFileOptions::default();
    z.start_file("report.json", opts).unwrap();
    z.write_all(br#"{"code": 3, "signal": null, "user_cpu_s": 1.5, "telemetry": {"jax_imported": true, "backend": "cpu"}}"#)
        .unwrap();
    z.start_file("stdout", opts).unwrap();
    z.write_all(b"out\n").unwrap();
    z.start_file("stderr", opts).unwrap();
    z.write_all(b"err\n").unwrap();
    for (name, body) in entries {
        z.start_file(*name, opts).unwrap();
        z.write_all(body).unwrap();
    }
    if let Some((name, target)) = symlink {
        z.add_symlink(name, target, opts).unwrap();
    }
    z.finish().unwrap().into_inner()
}

fn framed(nonce: &str, bytes: &[u8]) -> String {
    let text = encode(bytes);
    let lines: Vec<&str> = text
        .as_bytes()
        .chunks(50)
        .map(|c| std::str::from_utf8(c).unwrap())
        .collect();
    format!(
        "script output\n==jax-runner-return:{nonce}:begin==\n{}\n==jax-runner-return:{nonce}:end:{}==\n",
        lines.join("\n"),
        text.len()
    )
}

#[test]
fn the_block_is_found_by_its_nonce_and_decoded() {
    let bytes = archive(&[("data/a.json", b"{}")], None);
    let logs = framed("n1", &bytes);
    assert!(find(&logs, "other").is_none(), "another nonce is not ours");
    let mut r = find(&logs, "n1").unwrap();
    assert_eq!(r.report.code, Some(3));
    assert_eq!(r.report.user_cpu_s, 1.5);
    assert_eq!(
        r.report.telemetry().unwrap().backend.as_deref(),
        Some("cpu")
    );
    assert_eq!(r.stdout, b"out\n");
    assert_eq!(r.stderr, b"err\n");
    // A block cut short (the job killed while printing it) is not used.
    let cut = logs.replace("==jax-runner-return:n1:end", "x");
    assert!(find(&cut, "n1").is_none());
    let short = &logs[..logs.len() / 2];
    assert!(find(short, "n1").is_none());
}

#[test]
fn data_is_unpacked_into_its_folder_and_nowhere_else() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    std::fs::create_dir(&dir).unwrap();
    let bytes = archive(
        &[
            ("data/simulation_results.json", b"{\"ok\": 1}"),
            ("data/simulation_data/traces/t.csv", b"1,2\n"),
            ("data/empty/", b""),
        ],
        None,
    );
    let mut r = find(&framed("n", &bytes), "n").unwrap();
    assert_eq!(r.unpack_data(&dir, 1 << 20).unwrap(), 2);
    assert_eq!(
        std::fs::read(dir.join("simulation_results.json")).unwrap(),
        b"{\"ok\": 1}"
    );
    assert_eq!(
        std::fs::read(dir.join("simulation_data/traces/t.csv")).unwrap(),
        b"1,2\n"
    );
    assert!(dir.join("empty").is_dir());
}

#[test]
fn paths_that_leave_the_folder_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    std::fs::create_dir(&dir).unwrap();
    for name in [
        "data/../escaped.txt",
        "data//etc/escaped.txt",
        "data/a/../../x",
    ] {
        let bytes = archive(&[(name, b"x")], None);
        let mut r = find(&framed("n", &bytes), "n").unwrap();
        let e = r.unpack_data(&dir, 1 << 20);
        assert!(matches!(e, Err(UnpackError::Escapes(_))), "{name}: {e:?}");
    }
    assert!(!tmp.path().join("escaped.txt").exists());
    let bytes = archive(&[], Some(("data/link", "/etc/passwd")));
    let mut r = find(&framed("n", &bytes), "n").unwrap();
    assert!(matches!(
        r.unpack_data(&dir, 1 << 20),
        Err(UnpackError::Escapes(_))
    ));
    assert!(std::fs::symlink_metadata(dir.join("link")).is_err());
}

#[test]
fn links_already_in_the_folder_are_not_followed() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let outside = tmp.path().join("outside");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, dir.join("sub")).unwrap();
    std::os::unix::fs::symlink(outside.join("f"), dir.join("f")).unwrap();
    for name in ["data/sub/x", "data/f"] {
        let bytes = archive(&[(name, b"x")], None);
        let mut r = find(&framed("n", &bytes), "n").unwrap();
        let e = r.unpack_data(&dir, 1 << 20);
        assert!(matches!(e, Err(UnpackError::Link(_))), "{name}: {e:?}");
    }
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
}

#[test]
fn more_than_the_limit_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let big = vec![7u8; 4096];
    let bytes = archive(&[("data/a", &big[..]), ("data/b", &big[..])], None);
    let mut r = find(&framed("n", &bytes), "n").unwrap();
    assert!(matches!(
        r.unpack_data(tmp.path(), 5000),
        Err(UnpackError::TooLarge(5000))
    ));
    assert!(
        !tmp.path().join("b").exists(),
        "the file over the limit is removed"
    );
    let mut r = find(&framed("n", &bytes), "n").unwrap();
    assert_eq!(r.unpack_data(tmp.path(), 8192).unwrap(), 2);
}

#[test]
fn a_message_loses_the_block_and_keeps_the_rest() {
    let logs = framed("n", &archive(&[], None));
    assert_eq!(without_block(&logs, "n"), "script output");
    assert_eq!(
        without_block(&logs, "other"),
        logs,
        "another job's block stays"
    );
    assert_eq!(without_block("plain", "n"), "plain");
}
