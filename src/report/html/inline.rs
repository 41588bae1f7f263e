//! What goes inside the page's own `<script>` elements, and the policy that lets
//! nothing else run: the page is opened from disk, often straight out of an
//! untrusted pipeline's output, so escaping is backed by a Content-Security-Policy.

use serde::Serialize;
use sha2::{Digest, Sha256};

/// The policy of the page: no network, no plugins, inline styles, and only the one
/// script whose hash it names. An `onerror=` or `<script>` that escaped escaping
/// still would not run.
pub(super) fn content_security_policy(script: &str) -> String {
    let hash = base64(&Sha256::digest(script.as_bytes()));
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

/// Standard base64 with padding, as CSP hashes are written.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> shift) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_rfc_examples() {
        // RFC 4648, section 10.
        for (plain, encoded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(plain.as_bytes()), encoded, "{plain:?}");
        }
    }

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
