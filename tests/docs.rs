//! The documentation keeps its promises about itself: `docs/cli.md` is the binary's own
//! help, and every link in the README, ARCHITECTURE.md, docs/ and bench/README.md leads
//! to a file that exists and, with `#anchor`, to a heading in it; ARCHITECTURE.md
//! names every source file under `src/`.

mod common;

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use common::*;
use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};

/// The subcommands `--help` lists, in its order (less clap's own `help`).
fn subcommands(top: &str) -> Vec<String> {
    top.lines()
        .skip_while(|l| *l != "Commands:")
        .skip(1)
        .take_while(|l| !l.is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_string)
        .collect()
}

fn cli_reference() -> String {
    let top = help_text(&["--help"]);
    let subs = subcommands(&top);
    assert!(subs.iter().any(|s| s == "run"), "{top}");
    let mut md = String::from(
        "# Command-line reference\n\n\
         Generated from the binary's own `--help` by `tests/docs.rs`, which fails when the two \
         differ;\nafter changing an option, regenerate it with \
         `INSTA_UPDATE=always cargo test --test docs`.\n`jax-runner -h` prints the short \
         form: the options of daily use. How options also come\nfrom `jax-runner.toml` and \
         `JAX_RUNNER_*` variables is in [usage.md](usage.md).\n\n",
    );
    let mut sections = vec![("jax-runner".to_string(), top.clone())];
    for sub in &subs {
        sections.push((format!("jax-runner {sub}"), help_text(&[sub, "--help"])));
    }
    md.push_str("| command | section |\n| --- | --- |\n");
    for (name, _) in &sections {
        md.push_str(&format!("| `{name}` | [{name}](#{}) |\n", slug(name)));
    }
    for (name, text) in &sections {
        md.push_str(&format!("\n## `{name}`\n\n```text\n{}```\n", text));
    }
    md
}

/// Fails when the binary's help and the committed page drift apart;
/// `INSTA_UPDATE=always` rewrites `docs/cli.md` (see `common::snapshot`).
#[test]
fn the_cli_reference_is_the_binarys_own_help() {
    snapshot::assert_file("docs/cli.md", &cli_reference());
}

/// GitHub's anchor for a heading: lower case, only letters, digits, `-`, `_` and
/// spaces kept, spaces made `-`.
fn slug(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

struct Page {
    links: Vec<String>,
    anchors: HashSet<String>,
}

fn read_page(path: &Path) -> Page {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let mut links = Vec::new();
    let mut anchors = HashSet::new();
    let mut heading: Option<String> = None;
    for event in Parser::new_ext(&text, Options::all()) {
        match event {
            Event::Start(Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. }) => {
                links.push(dest_url.to_string())
            }
            Event::Start(Tag::Heading { .. }) => heading = Some(String::new()),
            Event::Text(t) | Event::Code(t) => {
                if let Some(h) = heading.as_mut() {
                    h.push_str(&t)
                }
            }
            Event::End(TagEnd::Heading(_)) => {
                let base = slug(&heading.take().unwrap_or_default());
                // A repeated heading gets -1, -2, … as on GitHub.
                let mut anchor = base.clone();
                let mut n = 0;
                while !anchors.insert(anchor.clone()) {
                    n += 1;
                    anchor = format!("{base}-{n}");
                }
            }
            _ => {}
        }
    }
    Page { links, anchors }
}

fn documentation() -> Vec<PathBuf> {
    let root = repo();
    let mut files = vec![
        root.join("README.md"),
        root.join("ARCHITECTURE.md"),
        root.join("bench/README.md"),
    ];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

#[test]
fn every_link_in_the_documentation_resolves() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for file in documentation() {
        let page = read_page(&file);
        for link in &page.links {
            if link.starts_with("http://")
                || link.starts_with("https://")
                || link.starts_with("mailto:")
            {
                continue;
            }
            checked += 1;
            let (target, anchor) = match link.split_once('#') {
                Some((t, a)) => (t, Some(a)),
                None => (link.as_str(), None),
            };
            let target_path = if target.is_empty() {
                file.clone()
            } else {
                file.parent().unwrap().join(target)
            };
            let shown = file.strip_prefix(repo()).unwrap_or(&file).display();
            if !target_path.exists() {
                broken.push(format!("{shown}: {link}: no such file"));
                continue;
            }
            let Some(anchor) = anchor else { continue };
            if target_path.extension().is_none_or(|e| e != "md") {
                continue;
            }
            let anchors = if target.is_empty() {
                page.anchors.clone()
            } else {
                read_page(&target_path).anchors
            };
            if !anchors.contains(anchor) {
                broken.push(format!("{shown}: {link}: no heading with that anchor"));
            }
        }
    }
    assert!(
        checked > 20,
        "only {checked} links found: is the parser reading the files?"
    );
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn slugs_are_githubs() {
    assert_eq!(slug("Use inside GNN"), "use-inside-gnn");
    assert_eq!(slug("`jax-runner doctor`"), "jax-runner-doctor");
    assert_eq!(
        slug("Failures, retries and the GPU→CPU fallback"),
        "failures-retries-and-the-gpucpu-fallback"
    );
    assert_eq!(slug("`<id>_results.json`"), "id_resultsjson");
}

/// Every source file under `src/` (`.rs` and `.py`, tests and nested modules
/// included), as a path from the repository's root.
fn source_files(dir: &Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n != "__pycache__") {
                source_files(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs" || e == "py") {
            let relative = path.strip_prefix(repo()).unwrap();
            out.push(relative.to_string_lossy().into_owned());
        }
    }
}

/// ARCHITECTURE.md is the map of the code: it names every file under `src/` and
/// `crates/` by its path (`src/report/escape.rs`), so a file added without a place in
/// it fails here.
#[test]
fn architecture_names_every_source_file() {
    let map = std::fs::read_to_string(repo().join("ARCHITECTURE.md")).unwrap();
    let mut files = Vec::new();
    source_files(&repo().join("src"), &mut files);
    source_files(&repo().join("crates"), &mut files);
    files.sort();
    assert!(
        files.len() > 100,
        "only {} files found under src/",
        files.len()
    );
    let missing: Vec<&String> = files
        .iter()
        .filter(|f| !map.contains(&format!("`{f}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md does not name these files (as `src/…`):\n{}",
        missing
            .iter()
            .map(|f| f.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
}
