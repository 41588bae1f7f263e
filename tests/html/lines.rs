//! One line per row of the scripts table at 1366 px: headless Chromium lays the page
//! out at 1366×800 and a measuring script reports, for every row, its height and any
//! cell whose text takes more than one line. The page's own Content-Security-Policy
//! would refuse that script, so it runs in a copy of the page without it; the
//! screenshots are of the page itself, kept under the tests' output folder.

use std::path::{Path, PathBuf};

use super::chromium::{body_tag, dump_dom_with, here, screenshot};
use super::dom::attr_str;
use super::synth;

/// What the measuring script writes on `<body>`: each row's height in pixels, how
/// many rows have it, and `row:column` of every cell that wrapped.
const MEASURE: &str = r##"<script>
(function () {
  var heights = {}, wrapped = [];
  var rows = document.querySelectorAll("#scripts tbody tr");
  Array.prototype.forEach.call(rows, function (r) {
    var h = Math.round(r.getBoundingClientRect().height);
    heights[h] = (heights[h] || 0) + 1;
    Array.prototype.forEach.call(r.cells, function (td, c) {
      var tops = {}, walk = document.createTreeWalker(td, NodeFilter.SHOW_TEXT), n;
      while ((n = walk.nextNode())) {
        if (!n.textContent.trim() || n.parentNode.closest("svg")) { continue; }
        var range = document.createRange();
        range.selectNodeContents(n);
        Array.prototype.forEach.call(range.getClientRects(), function (rc) {
          if (rc.width > 0) { tops[Math.round(rc.bottom)] = 1; }
        });
      }
      if (Object.keys(tops).length > 1) { wrapped.push(r.getAttribute("data-i") + ":" + c); }
    });
  });
  // A row of one short word per cell: the height of one line of the table.
  var probe = rows[0].cloneNode(false);
  Array.prototype.forEach.call(rows[0].cells, function () { probe.appendChild(document.createElement("td")).textContent = "x"; });
  rows[0].parentNode.appendChild(probe);
  var line = Math.round(probe.getBoundingClientRect().height);
  probe.remove();
  var wrap = document.querySelector(".table-wrap");
  document.body.setAttribute("data-row-heights", JSON.stringify(heights));
  document.body.setAttribute("data-line", String(line));
  document.body.setAttribute("data-wrapped", wrapped.join(" "));
  document.body.setAttribute("data-overflow", String(wrap.scrollWidth - wrap.clientWidth));
  document.body.setAttribute("data-cols", Array.prototype.map.call(document.querySelectorAll("#scripts th"), function (th) { return th.textContent + "=" + Math.round(th.getBoundingClientRect().width); }).join(" | "));
})();
</script>"##;

/// The folder the screenshots are kept in: `target/tmp/report-html/`.
fn output_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("report-html");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A copy of `page` without its CSP, with [`MEASURE`] at the end of the body.
fn measuring_copy(page: &Path) -> PathBuf {
    let html = std::fs::read_to_string(page).unwrap();
    let start = html
        .find("<meta http-equiv=\"Content-Security-Policy\"")
        .unwrap();
    let end = start + html[start..].find('>').unwrap() + 1;
    let html = format!("{}{}", &html[..start], &html[end..]);
    let html = html.replacen("</body>", &format!("{MEASURE}</body>"), 1);
    let copy = page.with_file_name("measured.html");
    std::fs::write(&copy, html).unwrap();
    copy
}

/// Lays out the report of `n` synthetic scripts at 1366 px, checks every row is one
/// line, and keeps a 1366×800 screenshot.
fn one_line_per_row(n: usize, jobs: usize) {
    let dir = tempfile::tempdir().unwrap();
    let page = synth::write_report(dir.path(), n, jobs);
    let dom = dump_dom_with(&measuring_copy(&page), &["--window-size=1366,800".into()]);
    let body = body_tag(&dom);
    let got = |name: &str| {
        super::dom::unescape(attr_str(body, name).unwrap_or_else(|| panic!("no {name}: {body}")))
    };
    let heights: std::collections::BTreeMap<String, usize> =
        serde_json::from_str(&got("data-row-heights")).unwrap();
    let line: f64 = got("data-line").parse().unwrap();
    eprintln!("{n} scripts at 1366 px: row heights {heights:?}, one line of the table {line} px");
    assert_eq!(got("data-wrapped"), "", "cells (row:column) that wrapped");
    assert_eq!(heights.values().sum::<usize>(), n, "{heights:?}");
    for h in heights.keys() {
        let h: f64 = h.parse().unwrap();
        // A status badge's padding may add a pixel or two; a second line adds ~17.
        assert!(
            h <= line + 4.0,
            "a row {h} px high, one line {line} px: {heights:?}"
        );
    }
    assert_eq!(
        got("data-overflow"),
        "0",
        "the table is wider than the window: {}",
        got("data-cols")
    );
    // The page as it opens, and its table: a copy with the sections above it folded.
    let png = output_dir().join(format!("report-{n}-1366x800.png"));
    screenshot(&page, "", &png, 1366, 800);
    let table = output_dir().join(format!("report-{n}-table-1366x800.png"));
    screenshot(&table_copy(&page), "", &table, 1366, 800);
    eprintln!("screenshots: {} and {}", png.display(), table.display());
}

/// A copy of `page` with the cards, timeline and failures folded away, so a
/// screenshot of the window's height shows the table.
fn table_copy(page: &Path) -> PathBuf {
    let fold = "<style>#summary .cards, #summary .classes, #timeline-section, #failures \
                { display: none; }</style></head>";
    let html = std::fs::read_to_string(page)
        .unwrap()
        .replacen("</head>", fold, 1);
    let copy = page.with_file_name("table.html");
    std::fs::write(&copy, html).unwrap();
    copy
}

#[test]
fn eight_scripts_are_one_line_each_at_1366_px() {
    if here("eight_scripts_are_one_line_each_at_1366_px") {
        one_line_per_row(8, 2);
    }
}

#[test]
fn a_thousand_scripts_are_one_line_each_at_1366_px() {
    if here("a_thousand_scripts_are_one_line_each_at_1366_px") {
        one_line_per_row(1000, 8);
    }
}
