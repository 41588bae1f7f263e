//! pytest's `-k` language: words joined by `and`, `or`, `not` and parentheses. A word
//! is a glob when it holds `*`, `?` or `[` (matching the whole id or relative path),
//! a substring otherwise (anywhere in either); both ignore case, as pytest's do.

use std::path::Path;

/// A parsed expression.
#[derive(Debug, Clone)]
pub enum Expr {
    Word(Word),
    Not(Box<Expr>),
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
}

/// One word: its text lower-cased, and its glob where it is one.
#[derive(Debug, Clone)]
pub struct Word {
    lower: String,
    glob: Option<glob::Pattern>,
}

const NO_CASE: glob::MatchOptions = glob::MatchOptions {
    case_sensitive: false,
    require_literal_separator: false,
    require_literal_leading_dot: false,
};

impl Expr {
    /// Whether the script with this id and relative path matches.
    pub fn matches(&self, id: &str, path: &Path) -> bool {
        match self {
            Expr::Word(w) => w.matches(id, &path.to_string_lossy()),
            Expr::Not(e) => !e.matches(id, path),
            Expr::And(a, b) => a.matches(id, path) && b.matches(id, path),
            Expr::Or(a, b) => a.matches(id, path) || b.matches(id, path),
        }
    }
}

impl Word {
    fn matches(&self, id: &str, path: &str) -> bool {
        match &self.glob {
            Some(g) => g.matches_with(id, NO_CASE) || g.matches_with(path, NO_CASE),
            None => {
                id.to_lowercase().contains(&self.lower) || path.to_lowercase().contains(&self.lower)
            }
        }
    }
}

/// Parses `text`; the error says what is wrong, for the option's message.
pub fn parse(text: &str) -> Result<Expr, String> {
    let tokens = tokens(text);
    let mut at = 0;
    let expr = or(&tokens, &mut at)?;
    match tokens.get(at) {
        None => Ok(expr),
        Some(t) => Err(format!("unexpected `{t}`: join words with and, or, not")),
    }
}

fn tokens(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    for c in text.chars() {
        if c.is_whitespace() || c == '(' || c == ')' {
            if !word.is_empty() {
                out.push(std::mem::take(&mut word));
            }
            if !c.is_whitespace() {
                out.push(c.to_string());
            }
        } else {
            word.push(c);
        }
    }
    if !word.is_empty() {
        out.push(word);
    }
    out
}

fn or(t: &[String], at: &mut usize) -> Result<Expr, String> {
    let mut left = and(t, at)?;
    while t.get(*at).map(String::as_str) == Some("or") {
        *at += 1;
        left = Expr::Or(Box::new(left), Box::new(and(t, at)?));
    }
    Ok(left)
}

fn and(t: &[String], at: &mut usize) -> Result<Expr, String> {
    let mut left = not(t, at)?;
    while t.get(*at).map(String::as_str) == Some("and") {
        *at += 1;
        left = Expr::And(Box::new(left), Box::new(not(t, at)?));
    }
    Ok(left)
}

fn not(t: &[String], at: &mut usize) -> Result<Expr, String> {
    if t.get(*at).map(String::as_str) == Some("not") {
        *at += 1;
        return Ok(Expr::Not(Box::new(not(t, at)?)));
    }
    atom(t, at)
}

fn atom(t: &[String], at: &mut usize) -> Result<Expr, String> {
    let Some(token) = t.get(*at) else {
        return Err("it ends where a word was expected".into());
    };
    *at += 1;
    match token.as_str() {
        "(" => {
            let inner = or(t, at)?;
            match t.get(*at).map(String::as_str) {
                Some(")") => {
                    *at += 1;
                    Ok(inner)
                }
                _ => Err("a `(` is not closed".into()),
            }
        }
        ")" | "and" | "or" => Err(format!("`{token}` where a word was expected")),
        word => {
            let glob = match word.contains(['*', '?', '[']) {
                true => Some(glob::Pattern::new(word).map_err(|e| {
                    format!(
                        "`{word}` is not a glob: {e} (quote the pattern so the shell leaves it)"
                    )
                })?),
                false => None,
            };
            Ok(Expr::Word(Word {
                lower: word.to_lowercase(),
                glob,
            }))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(expr: &str, id: &str) -> bool {
        parse(expr)
            .unwrap()
            .matches(id, Path::new(&format!("{id}/jax/{id}.py")))
    }

    #[test]
    fn words_join_with_and_or_not_and_parentheses() {
        assert!(m("pomdp", "POMDP_solver"), "case is ignored");
        assert!(m("pomdp or general", "general_model"));
        assert!(!m("pomdp and general", "general_model"));
        assert!(m("model and not pomdp", "general_model"));
        assert!(!m("model and not pomdp", "pomdp_model"));
        assert!(m("not (xx or yy) and only", "c_only"));
        assert!(!m("not (pomdp or general) and model", "general_model"));
        assert!(m("*_model*", "general_model"), "a glob word");
    }

    #[test]
    fn malformed_expressions_say_what_is_wrong() {
        for (bad, says) in [
            ("a and", "ends where a word"),
            ("(a or b", "not closed"),
            ("a b", "unexpected `b`"),
            ("or a", "`or` where a word"),
            ("[", "not a glob"),
        ] {
            let err = parse(bad).unwrap_err();
            assert!(err.contains(says), "{bad}: {err}");
        }
    }
}
