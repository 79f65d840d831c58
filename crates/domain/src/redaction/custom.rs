//! Custom patterns of a policy: regular expressions (the `regex` crate: linear time, no
//! backreferences or look-around), bounded in number, length and compiled size, so a
//! policy cannot make redaction slow or large. A bad pattern is an error naming it.

use regex::{Regex, RegexBuilder};

use super::{Hit, PolicyError};

/// Custom patterns a policy may name.
pub const MAX_PATTERNS: usize = 32;
/// Bytes of one pattern's source.
pub const MAX_PATTERN_LEN: usize = 1024;
/// Compiled size of one pattern (`RegexBuilder::size_limit`), and its lazy DFA's cache
/// (`dfa_size_limit`).
pub const MAX_COMPILED: usize = 1 << 20;
/// A custom name's length; names are letters, digits and '_', starting with a letter.
pub const MAX_NAME_LEN: usize = 32;

const BUILT_IN: &[&str] = &["EMAIL", "PHONE", "CARD", "IBAN", "IP"];

pub(super) struct Custom {
    pub name: String,
    /// The placeholder's label: the name in upper case.
    pub label: String,
    regex: Regex,
}

pub(super) fn compile(patterns: &[(String, String)]) -> Result<Vec<Custom>, PolicyError> {
    if patterns.len() > MAX_PATTERNS {
        return Err(PolicyError::TooManyPatterns(patterns.len()));
    }
    let mut out: Vec<Custom> = Vec::with_capacity(patterns.len());
    for (name, pattern) in patterns {
        let good_name = !name.is_empty()
            && name.len() <= MAX_NAME_LEN
            && name.as_bytes()[0].is_ascii_alphabetic()
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !good_name {
            return Err(PolicyError::BadName(name.clone()));
        }
        let label = name.to_ascii_uppercase();
        if BUILT_IN.contains(&label.as_str()) || out.iter().any(|c| c.label == label) {
            return Err(PolicyError::DuplicateName(name.clone()));
        }
        if pattern.len() > MAX_PATTERN_LEN {
            return Err(PolicyError::PatternTooLong {
                name: name.clone(),
                len: pattern.len(),
            });
        }
        let invalid = |message: String| PolicyError::InvalidPattern {
            name: name.clone(),
            message,
        };
        if pattern.is_empty() {
            return Err(invalid("the pattern is empty".into()));
        }
        let regex = RegexBuilder::new(pattern)
            .size_limit(MAX_COMPILED)
            .dfa_size_limit(MAX_COMPILED)
            .build()
            .map_err(|err| invalid(err.to_string()))?;
        if regex.is_match("") {
            return Err(invalid("the pattern matches the empty string".into()));
        }
        out.push(Custom {
            name: name.clone(),
            label,
            regex,
        });
    }
    Ok(out)
}

impl Custom {
    /// Matches, normalised as they are (a custom value has no canonical form).
    pub(super) fn find(&self, text: &str, out: &mut Vec<Hit>) {
        out.extend(
            self.regex
                .find_iter(text)
                .filter(|m| !m.is_empty())
                .map(|m| Hit {
                    start: m.start(),
                    end: m.end(),
                    norm: m.as_str().to_string(),
                }),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(name: &str, pattern: &str) -> Result<Vec<Custom>, PolicyError> {
        compile(&[(name.to_string(), pattern.to_string())])
    }

    #[test]
    fn redaction_custom_matches() {
        let compiled = one("employee_id", r"\bEMP-\d{6}\b").unwrap();
        let mut out = Vec::new();
        compiled[0].find("badge EMP-004211 and EMP-12", &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].norm, "EMP-004211");
        assert_eq!(compiled[0].label, "EMPLOYEE_ID");
    }

    #[test]
    fn redaction_custom_errors_name_the_pattern() {
        let err = one("ticket", r"TICKET-(\d+").err().unwrap();
        assert!(matches!(&err, PolicyError::InvalidPattern { name, .. } if name == "ticket"));
        assert!(err.to_string().contains("\"ticket\""), "{err}");
        // Too big once compiled: a counted repetition of a Unicode class.
        let err = one("huge", r"\w{1000}\w{1000}\w{1000}").err().unwrap();
        assert!(
            matches!(&err, PolicyError::InvalidPattern { name, message } if name == "huge" && message.contains("size limit")),
            "{err}"
        );
        assert!(matches!(
            one("empty", "").err().unwrap(),
            PolicyError::InvalidPattern { .. }
        ));
        assert!(matches!(
            one("opt", "a*").err().unwrap(),
            PolicyError::InvalidPattern { .. }
        ));
        assert!(matches!(
            one("long", &"a".repeat(MAX_PATTERN_LEN + 1)).err().unwrap(),
            PolicyError::PatternTooLong { len: 1025, .. }
        ));
        assert!(matches!(
            one("9lives", "x").err().unwrap(),
            PolicyError::BadName(_)
        ));
        assert!(matches!(
            one("has space", "x").err().unwrap(),
            PolicyError::BadName(_)
        ));
        assert!(matches!(
            one("", "x").err().unwrap(),
            PolicyError::BadName(_)
        ));
        assert!(matches!(
            one("Email", "x").err().unwrap(),
            PolicyError::DuplicateName(_)
        ));
        let twice = compile(&[("a".into(), "x".into()), ("A".into(), "y".into())]);
        assert!(matches!(
            twice.err().unwrap(),
            PolicyError::DuplicateName(_)
        ));
        let many: Vec<(String, String)> = (0..=MAX_PATTERNS)
            .map(|k| (format!("p{k}"), "x".into()))
            .collect();
        assert!(matches!(
            compile(&many).err().unwrap(),
            PolicyError::TooManyPatterns(33)
        ));
    }
}
