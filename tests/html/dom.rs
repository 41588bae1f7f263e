//! Reading what headless Chromium dumped: the table's rows, the cards, the timeline's
//! bars, and the checks every report.html must pass whatever its size.

/// A string attribute of a start tag.
pub fn attr_str<'a>(tag: &'a str, name: &str) -> Option<&'a str> {
    let key = format!(" {name}=\"");
    let start = tag.find(&key)? + key.len();
    let end = start + tag[start..].find('"')?;
    Some(&tag[start..end])
}

/// A numeric attribute of a start tag.
pub fn attr(tag: &str, name: &str) -> f64 {
    attr_str(tag, name)
        .unwrap_or_else(|| panic!("no {name} in {tag}"))
        .parse()
        .unwrap()
}

/// The start tag at `i`.
fn tag_at(dom: &str, i: usize) -> &str {
    &dom[i..=i + dom[i..].find('>').unwrap()]
}

/// One row of the scripts table.
#[derive(Debug)]
pub struct Row {
    pub i: String,
    pub id: String,
    pub status: String,
    pub attempts: usize,
    pub hidden: bool,
}

/// The table's rows, in the order the page shows them.
pub fn rows(dom: &str) -> Vec<Row> {
    let start = dom
        .find("<table id=\"scripts\"")
        .expect("the scripts table");
    let body = &dom[start..start + dom[start..].find("</table>").unwrap()];
    let body = &body[body.find("<tbody>").expect("a tbody")..];
    body.match_indices("<tr ")
        .map(|(i, _)| {
            let tag = tag_at(body, i);
            let rest = &body[i..];
            let row = &rest[..rest.find("</tr>").unwrap()];
            let id_tag = tag_at(row, row.find("<td class=\"id\"").expect("an id cell"));
            let badge = row.find("<span class=\"badge ").expect("a status badge");
            let attempts = row
                .find("<td class=\"num attempts\"")
                .expect("an attempts cell");
            Row {
                i: attr_str(tag, "data-i").expect("data-i").to_string(),
                id: unescape(attr_str(id_tag, "data-v").unwrap()),
                status: attr_str(tag_at(row, badge), "class").unwrap()["badge ".len()..]
                    .to_string(),
                attempts: attr(tag_at(row, attempts), "data-v") as usize,
                hidden: tag.contains(" hidden"),
            }
        })
        .collect()
}

/// Entities Chromium writes in attribute values.
pub fn unescape(s: &str) -> String {
    s.replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// One attempt on the timeline: its `<g class="bar">` group.
#[derive(Debug)]
pub struct Bar {
    pub i: String,
    pub status: String,
    pub width: f64,
    pub marked: bool,
    /// The label's width as Chromium measured it, when the bar kept one.
    pub label_w: Option<f64>,
}

pub fn bars(dom: &str) -> Vec<Bar> {
    dom.match_indices("<g class=\"bar")
        .map(|(i, _)| {
            let g = &dom[i..i + dom[i..].find("</g>").expect("a closed group")];
            let rect = tag_at(g, g.find("<rect").expect("a rect"));
            let class = attr_str(rect, "class").unwrap();
            Bar {
                i: attr_str(tag_at(g, 0), "data-i").unwrap().to_string(),
                status: class.trim_start_matches("attempt ").to_string(),
                width: attr(rect, "width"),
                marked: g.contains("<path class=\"mark"),
                label_w: g
                    .find("<text class=\"bar-label\"")
                    .map(|t| attr(tag_at(g, t), "data-w")),
            }
        })
        .collect()
}

/// `(status, count)` of each status card, and the total card's count.
pub fn cards(dom: &str) -> (Vec<(String, usize)>, usize) {
    let total = dom
        .find(" data-total=\"")
        .map(|i| {
            let tag = tag_at(dom, dom[..i].rfind('<').unwrap());
            attr(tag, "data-total") as usize
        })
        .expect("a total card");
    let status = dom
        .match_indices(" data-status=\"")
        .map(|(i, _)| {
            let tag = tag_at(dom, dom[..i].rfind('<').unwrap());
            (
                attr_str(tag, "data-status").unwrap().to_string(),
                attr(tag, "data-n") as usize,
            )
        })
        .collect();
    (status, total)
}

/// What every report must show, at any size: failures first, cards that add up, a
/// filter, labels inside their bars, a mark on every failure, no "no samples".
pub fn assert_readable(dom: &str, scripts: usize) {
    let rows = rows(dom);
    assert_eq!(rows.len(), scripts, "one row per script");
    let first_success = rows.iter().position(|r| r.status == "succeeded");
    if let Some(first) = first_success {
        let late: Vec<&Row> = rows[first..]
            .iter()
            .filter(|r| r.status != "succeeded")
            .collect();
        assert!(
            late.is_empty(),
            "{} failures after a success, the first: {:?}",
            late.len(),
            &late[..late.len().min(3)]
        );
    }

    let (status_cards, total) = cards(dom);
    assert_eq!(total, scripts, "the scripts card");
    let sum: usize = status_cards.iter().map(|c| c.1).sum();
    assert_eq!(
        sum, scripts,
        "status cards {status_cards:?} add up to {sum}"
    );
    for (status, n) in &status_cards {
        let counted = rows.iter().filter(|r| &r.status == status).count();
        assert_eq!(*n, counted, "the {status} card");
    }

    assert!(
        dom.contains("<input type=\"search\" id=\"filter\""),
        "no filter box"
    );
    assert!(!dom.contains("no samples"), "a row says \"no samples\"");

    let bars = bars(dom);
    assert!(
        dom.contains("data-dropped-labels=\"0\""),
        "the page had to drop labels it planned: the width estimate is off"
    );
    for b in &bars {
        if let Some(w) = b.label_w {
            assert!(w + 8.0 <= b.width, "a label of {w} in a bar of {}", b.width);
        }
        if b.status != "succeeded" {
            assert!(b.marked, "an unmarked failed attempt: {b:?}");
            assert!(b.width >= 4.0, "a failed attempt too thin to see: {b:?}");
        }
    }
    // Failures are drawn last, so nothing covers them.
    let first_failed = bars.iter().position(|b| b.status != "succeeded");
    if let Some(first) = first_failed {
        assert!(bars[first..].iter().all(|b| b.status != "succeeded"));
    }
    // A script stopped before it started has no time to be drawn at.
    for r in rows
        .iter()
        .filter(|r| r.status != "succeeded" && r.attempts > 0)
    {
        assert!(
            bars.iter()
                .any(|b| b.i == r.i && b.status == r.status && b.marked),
            "{} ({}) has no marked bar on the timeline",
            r.id,
            r.status
        );
    }
}

/// Checks `png` is a PNG of `width` pixels across with more in it than a blank page.
pub fn assert_screenshot(png: &std::path::Path, width: u32) {
    let bytes = std::fs::read(png).expect("a screenshot");
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    let w = u32::from_be_bytes(bytes[16..20].try_into().unwrap());
    let h = u32::from_be_bytes(bytes[20..24].try_into().unwrap());
    assert_eq!(w, width, "screenshot width");
    assert!(h >= 600, "screenshot height {h}");
    // A blank or single-colour page compresses to a few kilobytes.
    assert!(bytes.len() > 40_000, "a {} byte screenshot", bytes.len());
    if let Some(keep) = std::env::var_os("JAX_RUNNER_KEEP_SCREENSHOTS") {
        let keep = std::path::Path::new(&keep);
        std::fs::create_dir_all(keep).unwrap();
        std::fs::copy(png, keep.join(png.file_name().unwrap())).unwrap();
    }
}
