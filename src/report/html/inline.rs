//! What goes inside the page's own `<script>` elements, and the policy that lets
//! nothing else run: the page is opened from disk, often straight out of an
//! untrusted pipeline's output, so escaping is backed by a Content-Security-Policy.

use serde::Serialize;
use sha2::{Digest, Sha256};

/// The policy of the page: no network, no plugins, inline styles, and only the one
/// script whose hash it names. An `onerror=` or `<script>` that escaped escaping
/// still would not run.
pub(super) fn content_security_policy(script: &str) -> String {
    use base64::Engine;
    // Standard base64 with padding, as CSP hashes are written.
    let hash = base64::engine::general_purpose::STANDARD.encode(Sha256::digest(script.as_bytes()));
    format!(
        "default-src 'none'; script-src 'sha256-{hash}'; style-src 'unsafe-inline'; \
         img-src data:; base-uri 'none'; form-action 'none'"
    )
}

/// `value` as JSON that can sit inside `<script type="application/json">`: `<`, `>`
/// and `&` are written as `\u003c`, `\u003e`, `\u0026`, so no `</script>` or `<!--`
/// in a script's output can end the element. `JSON.parse` reads them back unchanged.
pub(super) fn json_for_script<T: Serialize>(value: &T) -> String {
    let json = serde_json::to_string(value).unwrap_or_else(|_| "[]".into());
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            // Valid in JSON, but line terminators in older JavaScript parsers.
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_names_the_scripts_hash() {
        // `printf 'alert(1)' | openssl dgst -sha256 -binary | base64`
        let csp = content_security_policy("alert(1)");
        assert!(
            csp.contains("'sha256-bhHHL3z2vDgxUt0W3dWQOrprscmda2Y5pLsLg4GF+pI='"),
            "{csp}"
        );
        assert!(csp.starts_with("default-src 'none';"));
    }

    #[test]
    fn json_cannot_close_its_script_element() {
        let text = json_for_script(&vec!["</script><script>alert(1)</script>", "<!--", "a&b"]);
        assert!(!text.contains('<') && !text.contains('>') && !text.contains('&'));
        let back: Vec<String> = serde_json::from_str(&text).unwrap();
        assert_eq!(back[0], "</script><script>alert(1)</script>");
        assert_eq!(back[2], "a&b");
    }
}
