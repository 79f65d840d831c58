//! Redaction of personal identifiers before text leaves for a language model (issue 49,
//! item 3): a [`Policy`] names detectors (email addresses, phone numbers, payment cards,
//! IBANs, IP addresses) and custom regular expressions; [`Redactor::new`] validates and
//! compiles it once, under the project's key; [`Redactor::redact`] replaces every value
//! found with a typed placeholder, `[EMAIL_3f9a0c21b7d4]`.
//!
//! **Not wired in yet.** Nothing calls this module: the policy's storage per project, its
//! API, the call in semantic extraction, the episodes' keep-or-redact choice and the
//! reversible-token action come next (see issue 49). No proto or storage change here.
//!
//! # Placeholders
//!
//! The suffix is HMAC-SHA256, keyed by the project's key, of the kind's label and the
//! value's normalised form (emails lowercased; phones and cards their digits; IBANs upper
//! case without spaces; IPs in `std`'s canonical form; custom matches as they are). The
//! same value gets the same placeholder within a project, however it was written, so the
//! facts a model extracts about it still join; another project (another key) gets another
//! placeholder, so placeholders do not link projects, and without the key one cannot test
//! a guess (a phone number's space is small enough to enumerate, so a plain hash would not
//! hide it).
//!
//! The suffix is 12 hex digits (48 bits). Two different values of one kind in one project
//! share a placeholder (their facts would merge) with probability about n²/2⁴⁹ for n
//! distinct values: 2·10⁻⁷ at 10,000, 2·10⁻⁵ at 100,000, 0.2% at a million. 8 digits
//! (32 bits) would reach 1% at about 9,000 values; 16 cost a small model more tokens to
//! copy back faithfully for no practical gain at a project's scale.
//!
//! # Matching
//!
//! All detectors run over the text; where their matches overlap, the earliest wins, then
//! the longest, then the more specific detector ([`Detector::ALL`]'s order: email, card,
//! IBAN, IP, phone; then custom patterns in the policy's order), so findings never
//! overlap. Placeholders already in the text are left alone (no detector
//! or custom pattern may match across one), and redaction repeats on its own output until
//! nothing more is found (a second pass, usually finding nothing), so redacting redacted
//! text changes nothing.

mod card;
mod chain;
pub mod custom;
mod email;
mod iban;
mod ip;
mod keyed;
mod phone;

use std::ops::Range;
use std::sync::LazyLock;

use regex::Regex;

pub use card::luhn;

/// The shortest key [`Redactor::new`] accepts (bytes).
pub const MIN_KEY_LEN: usize = 16;
/// Hex digits of a placeholder's keyed hash (see the module's documentation).
pub const SUFFIX_HEX: usize = 12;

/// A built-in detector.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Detector {
    Email,
    /// Payment card numbers (Luhn-checked).
    Card,
    Iban,
    /// IPv4 and IPv6 addresses.
    Ip,
    Phone,
}

impl Detector {
    /// Every detector, the most specific first: that is their precedence when two
    /// match the same span (a Luhn-valid "4111 1111 1111 11" is a card, not a phone).
    pub const ALL: [Detector; 5] = [
        Detector::Email,
        Detector::Card,
        Detector::Iban,
        Detector::Ip,
        Detector::Phone,
    ];

    /// The placeholder's label.
    pub fn label(self) -> &'static str {
        match self {
            Detector::Email => "EMAIL",
            Detector::Phone => "PHONE",
            Detector::Card => "CARD",
            Detector::Iban => "IBAN",
            Detector::Ip => "IP",
        }
    }
}

/// What a project redacts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Policy {
    pub detectors: Vec<Detector>,
    /// `(name, pattern)`: the name (letters, digits, '_') labels the placeholder in upper
    /// case; the pattern is a `regex` crate expression.
    pub custom: Vec<(String, String)>,
}

impl Policy {
    /// Every built-in detector, no custom pattern.
    pub fn all_built_in() -> Policy {
        Policy {
            detectors: Detector::ALL.to_vec(),
            custom: Vec::new(),
        }
    }
}

/// Why a policy (or key) was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("the redaction key must be at least {MIN_KEY_LEN} bytes (got {0})")]
    KeyTooShort(usize),
    #[error("a redaction policy has at most {max} custom patterns (got {0})", max = custom::MAX_PATTERNS)]
    TooManyPatterns(usize),
    #[error(
        "custom pattern name {0:?} must be 1 to {max} letters, digits or '_', starting with a letter",
        max = custom::MAX_NAME_LEN
    )]
    BadName(String),
    #[error("custom pattern name {0:?} is used twice or names a built-in detector")]
    DuplicateName(String),
    #[error("custom pattern {name:?} is {len} bytes long; at most {max} are allowed", max = custom::MAX_PATTERN_LEN)]
    PatternTooLong { name: String, len: usize },
    #[error("custom pattern {name:?} is not a usable regular expression: {message}")]
    InvalidPattern { name: String, message: String },
}

/// What a finding is.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    Builtin(Detector),
    /// A custom pattern, by its name in the policy.
    Custom(String),
}

/// One value found: its kind and its byte range in the text given to
/// [`Redactor::redact`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    pub kind: Kind,
    pub span: Range<usize>,
}

/// Redacted text and what was replaced, in order, never overlapping.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Redacted {
    pub text: String,
    pub findings: Vec<Finding>,
}

/// A detector's match: where, and the value's normalised form.
struct Hit {
    start: usize,
    end: usize,
    norm: String,
}

/// A match tagged with its detector's slot (its priority).
struct Candidate {
    slot: usize,
    hit: Hit,
}

/// A replacement made by one pass: the value's range before and the placeholder's after.
struct Edit {
    old_end: usize,
    new_end: usize,
}

/// A placeholder as [`Redactor::redact`] writes it.
static PLACEHOLDER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(&format!(r"\[[A-Z][A-Z0-9_]*_[0-9a-f]{{{SUFFIX_HEX}}}\]")).expect("a valid regex")
});

/// A compiled policy under one project's key. Send + Sync: build it once, share it.
pub struct Redactor {
    detectors: Vec<Detector>,
    custom: Vec<custom::Custom>,
    key: keyed::Keyed,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redactor")
            .field("detectors", &self.detectors)
            .field(
                "custom",
                &self.custom.iter().map(|c| &c.name).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl Redactor {
    /// Validates and compiles `policy` under `key`, the project's own secret (at least
    /// [`MIN_KEY_LEN`] bytes; the caller keeps it, e.g. derived from a server secret and
    /// the project's id).
    pub fn new(policy: &Policy, key: &[u8]) -> Result<Redactor, PolicyError> {
        if key.len() < MIN_KEY_LEN {
            return Err(PolicyError::KeyTooShort(key.len()));
        }
        // In precedence order, once each.
        let detectors: Vec<Detector> = Detector::ALL
            .into_iter()
            .filter(|d| policy.detectors.contains(d))
            .collect();
        Ok(Redactor {
            detectors,
            custom: custom::compile(&policy.custom)?,
            key: keyed::Keyed::new(key).ok_or(PolicyError::KeyTooShort(key.len()))?,
        })
    }

    /// `text` with every value the policy detects replaced by its placeholder.
    pub fn redact(&self, text: &str) -> Redacted {
        let (mut out, mut findings, first) = self.pass(text);
        if findings.is_empty() {
            return Redacted {
                text: out,
                findings,
            };
        }
        // Replacing a value can change its neighbours' context (a number glued to a
        // custom match is clean beside a placeholder): repeat until nothing is found.
        // Each pass turns at least one unprotected byte into a placeholder, so it ends.
        let mut passes = vec![first];
        loop {
            let (next, mut found, edits) = self.pass(&out);
            if found.is_empty() {
                break;
            }
            for finding in &mut found {
                for edits in passes.iter().rev() {
                    finding.span = back(edits, finding.span.start)..back(edits, finding.span.end);
                }
            }
            findings.extend(found);
            passes.push(edits);
            out = next;
        }
        findings.sort_by_key(|f| f.span.start);
        Redacted {
            text: out,
            findings,
        }
    }

    /// One pass: the text, its findings and the replacements made.
    fn pass(&self, text: &str) -> (String, Vec<Finding>, Vec<Edit>) {
        let bytes = text.as_bytes();
        let digit = bytes.iter().any(u8::is_ascii_digit);
        let mut candidates: Vec<Candidate> = Vec::new();
        let mut hits = Vec::new();
        for (slot, detector) in self.detectors.iter().enumerate() {
            match detector {
                Detector::Email => email::find(text, &mut hits),
                Detector::Phone if digit => phone::find(text, &mut hits),
                Detector::Card if digit => card::find(text, &mut hits),
                Detector::Iban if digit => iban::find(text, &mut hits),
                Detector::Ip => {
                    if digit {
                        ip::find_v4(text, &mut hits);
                    }
                    ip::find_v6(text, &mut hits);
                }
                _ => {}
            }
            candidates.extend(hits.drain(..).map(|hit| Candidate { slot, hit }));
        }
        for (k, custom) in self.custom.iter().enumerate() {
            custom.find(text, &mut hits);
            let slot = self.detectors.len() + k;
            candidates.extend(hits.drain(..).map(|hit| Candidate { slot, hit }));
        }
        if candidates.is_empty() {
            return (text.to_string(), Vec::new(), Vec::new());
        }
        let protected: Vec<Range<usize>> = if text.contains('[') {
            PLACEHOLDER.find_iter(text).map(|m| m.range()).collect()
        } else {
            Vec::new()
        };
        candidates.sort_by(|a, b| {
            (a.hit.start, b.hit.end, a.slot).cmp(&(b.hit.start, a.hit.end, b.slot))
        });
        let mut out = String::with_capacity(text.len() + 16);
        let mut findings = Vec::new();
        let mut edits = Vec::new();
        let mut copied = 0;
        for Candidate { slot, hit } in candidates {
            if hit.start < copied || overlaps(&protected, hit.start, hit.end) {
                continue;
            }
            let (kind, label) = match self.detectors.get(slot) {
                Some(d) => (Kind::Builtin(*d), d.label()),
                None => {
                    let c = &self.custom[slot - self.detectors.len()];
                    (Kind::Custom(c.name.clone()), c.label.as_str())
                }
            };
            out.push_str(&text[copied..hit.start]);
            self.placeholder(label, &hit.norm, &mut out);
            edits.push(Edit {
                old_end: hit.end,
                new_end: out.len(),
            });
            findings.push(Finding {
                kind,
                span: hit.start..hit.end,
            });
            copied = hit.end;
        }
        out.push_str(&text[copied..]);
        (out, findings, edits)
    }

    fn placeholder(&self, label: &str, norm: &str, out: &mut String) {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mac = self.key.mac(&[label.as_bytes(), &[0], norm.as_bytes()]);
        out.push('[');
        out.push_str(label);
        out.push('_');
        for byte in &mac[..SUFFIX_HEX / 2] {
            out.push(HEX[usize::from(byte >> 4)] as char);
            out.push(HEX[usize::from(byte & 15)] as char);
        }
        out.push(']');
    }
}

/// Whether `start..end` overlaps one of the sorted, disjoint `ranges`.
fn overlaps(ranges: &[Range<usize>], start: usize, end: usize) -> bool {
    let k = ranges.partition_point(|r| r.end <= start);
    ranges.get(k).is_some_and(|r| r.start < end)
}

/// An offset of a pass's output, outside its placeholders, in the pass's input.
fn back(edits: &[Edit], at: usize) -> usize {
    let k = edits.partition_point(|e| e.new_end <= at);
    match k.checked_sub(1) {
        Some(k) => at - edits[k].new_end + edits[k].old_end,
        None => at,
    }
}

#[cfg(test)]
mod tests;
