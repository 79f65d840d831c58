//! Email addresses: a local part of letters, digits and `._%+-`, an '@', and a domain of
//! two or more labels ending in an alphabetic top-level label of two letters or more
//! ("ann.lee+news@mail.example.co.uk"). `user@localhost`, `@handle` and `x@10.0.0.1`
//! are not addresses. Normalised lowercased.

use std::sync::LazyLock;

use regex::Regex;

use super::Hit;

static CANDIDATE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"[A-Za-z0-9._%+\-]+@[A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)+").expect("a valid regex")
});

pub(super) fn find(text: &str, out: &mut Vec<Hit>) {
    if !text.contains('@') {
        return;
    }
    for m in CANDIDATE.find_iter(text) {
        let mut start = m.start();
        let candidate = m.as_str();
        let Some(at) = candidate.find('@') else {
            continue;
        };
        let local = &candidate[..at];
        let trimmed = local.trim_start_matches('.');
        start += local.len() - trimmed.len();
        if trimmed.is_empty() || trimmed.ends_with('.') || trimmed.contains("..") {
            continue;
        }
        // A word glued before the local part (non-ASCII letters) is not an address.
        if text[..start]
            .chars()
            .next_back()
            .is_some_and(char::is_alphanumeric)
        {
            continue;
        }
        let domain = &candidate[at + 1..];
        let labels: Vec<&str> = domain.split('.').collect();
        // The longest prefix of labels that ends in a valid top-level label.
        let Some(keep) = (2..=labels.len()).rev().find(|&k| {
            let tld = labels[k - 1];
            tld.len() >= 2 && tld.bytes().all(|b| b.is_ascii_alphabetic())
        }) else {
            continue;
        };
        if labels[..keep]
            .iter()
            .any(|l| l.is_empty() || l.len() > 63 || l.starts_with('-') || l.ends_with('-'))
        {
            continue;
        }
        let domain_len = labels[..keep].iter().map(|l| l.len()).sum::<usize>() + keep - 1;
        let end = m.start() + at + 1 + domain_len;
        if text[end..]
            .chars()
            .next()
            .is_some_and(char::is_alphanumeric)
        {
            continue;
        }
        out.push(Hit {
            start,
            end,
            norm: text[start..end].to_ascii_lowercase(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(text: &str) -> Vec<String> {
        let mut out = Vec::new();
        find(text, &mut out);
        out.iter()
            .map(|h| text[h.start..h.end].to_string())
            .collect()
    }

    #[test]
    fn redaction_email_positives() {
        for (text, want) in [
            (
                "mail ann.lee+news@mail.example.co.uk now",
                "ann.lee+news@mail.example.co.uk",
            ),
            ("<Bob_99@Example.COM>", "Bob_99@Example.COM"),
            ("write to j.doe@uni-koeln.de.", "j.doe@uni-koeln.de"),
            ("(x@y.io)", "x@y.io"),
            ("...eve@corp.example.org", "eve@corp.example.org"),
            ("tom@example.com.5 is odd", "tom@example.com"),
        ] {
            assert_eq!(found(text), vec![want.to_string()], "{text}");
        }
        let mut out = Vec::new();
        find("Ann@Example.com", &mut out);
        assert_eq!(out[0].norm, "ann@example.com");
    }

    #[test]
    fn redaction_email_near_misses() {
        for text in [
            "user@localhost",
            "@handle says hi",
            "x@10.0.0.1",
            "name@example.c",
            "a..b@example.com",
            "dot.@example.com",
            "me@-bad.com",
            "me@example.com-",
            "email at example dot com",
            "café@exampleé.com",
        ] {
            assert!(found(text).is_empty(), "{text}: {:?}", found(text));
        }
    }
}
