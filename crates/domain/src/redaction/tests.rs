//! The redactor as a whole: overlaps, placeholders, keys, and properties.

use proptest::prelude::*;

use super::*;

const KEY_A: &[u8] = b"project-a-key-0123456789";
const KEY_B: &[u8] = b"project-b-key-0123456789";

fn all(key: &[u8]) -> Redactor {
    Redactor::new(&Policy::all_built_in(), key).unwrap()
}

#[test]
fn redaction_masks_every_kind() {
    let text = "Ann (ann@example.com, +44 20 7946 0958) paid with 4111 1111 1111 1111 \
                from DE89 3704 0044 0532 0130 00 via 10.0.0.1 and 2001:db8::1.";
    let r = all(KEY_A).redact(text);
    let kinds: Vec<&Kind> = r.findings.iter().map(|f| &f.kind).collect();
    assert_eq!(
        kinds,
        [
            Detector::Email,
            Detector::Phone,
            Detector::Card,
            Detector::Iban,
            Detector::Ip,
            Detector::Ip
        ]
        .iter()
        .map(|d| Kind::Builtin(*d))
        .collect::<Vec<_>>()
        .iter()
        .collect::<Vec<_>>()
    );
    let spans: Vec<&str> = r.findings.iter().map(|f| &text[f.span.clone()]).collect();
    assert_eq!(
        spans,
        [
            "ann@example.com",
            "+44 20 7946 0958",
            "4111 1111 1111 1111",
            "DE89 3704 0044 0532 0130 00",
            "10.0.0.1",
            "2001:db8::1"
        ]
    );
    for value in spans {
        assert!(!r.text.contains(value), "{value} in {}", r.text);
    }
    let shape = Regex::new(
        r"^Ann \(\[EMAIL_[0-9a-f]{12}\], \[PHONE_[0-9a-f]{12}\]\) paid with \[CARD_[0-9a-f]{12}\] from \[IBAN_[0-9a-f]{12}\] via \[IP_[0-9a-f]{12}\] and \[IP_[0-9a-f]{12}\]\.$",
    )
    .unwrap();
    assert!(shape.is_match(&r.text), "{}", r.text);
    println!("{}", r.text);
}

#[test]
fn redaction_normalised_values_share_a_placeholder() {
    let r = all(KEY_A);
    let one = r.redact(
        "Ann@Example.COM / 4111-1111-1111-1111 / de89370400440532013000 / 2001:DB8:0:0:0:0:0:1",
    );
    let two = r.redact(
        "ann@example.com / 4111 1111 1111 1111 / DE89 3704 0044 0532 0130 00 / 2001:db8::1",
    );
    assert_eq!(one.text, two.text);
    // Another key: every placeholder differs.
    let other = all(KEY_B).redact(
        "ann@example.com / 4111 1111 1111 1111 / DE89 3704 0044 0532 0130 00 / 2001:db8::1",
    );
    for (a, b) in two.text.split(" / ").zip(other.text.split(" / ")) {
        assert_ne!(a, b);
    }
    // The kind is part of the hash: the same digits as a phone and as a custom match differ.
    let policy = Policy {
        detectors: vec![Detector::Phone],
        custom: vec![("ref".into(), r"REF\d{10}".into())],
    };
    let r = Redactor::new(&policy, KEY_A).unwrap();
    let out = r.redact("5551234567 REF5551234567").text;
    let suffixes: Vec<&str> = out
        .split(' ')
        .map(|p| &p[p.len() - 13..p.len() - 1])
        .collect();
    assert_ne!(suffixes[0], suffixes[1], "{out}");
}

#[test]
fn redaction_overlaps_earliest_then_longest() {
    let policy = Policy {
        detectors: Detector::ALL.to_vec(),
        custom: vec![
            ("short".into(), r"ann@".into()),
            ("inner".into(), r"example".into()),
            ("later".into(), r"0100 ext 7".into()),
        ],
    };
    let r = Redactor::new(&policy, KEY_A).unwrap();
    let text = "xann@example.com? and 415-555-0100 ext 7";
    let out = r.redact(text);
    let got: Vec<(Kind, &str)> = out
        .findings
        .iter()
        .map(|f| (f.kind.clone(), &text[f.span.clone()]))
        .collect();
    // The email starts first (the 'x' is in its local part), so "ann@" and "example"
    // inside it lose; the phone starts before "0100 ext 7".
    assert_eq!(
        got,
        [
            (Kind::Builtin(Detector::Email), "xann@example.com"),
            (Kind::Builtin(Detector::Phone), "415-555-0100"),
        ]
    );
    // Findings never overlap, and are in order.
    for w in out.findings.windows(2) {
        assert!(w[0].span.end <= w[1].span.start);
    }
    // Same start: the longest wins; same span: the detector listed first.
    let policy = Policy {
        detectors: vec![Detector::Email],
        custom: vec![
            ("user".into(), r"bob".into()),
            ("mail".into(), r"bob@example\.org".into()),
        ],
    };
    let r = Redactor::new(&policy, KEY_A).unwrap();
    let out = r.redact("bob@example.org");
    assert_eq!(out.findings.len(), 1);
    assert_eq!(out.findings[0].kind, Kind::Builtin(Detector::Email));
    // An earlier custom match beats a longer phone; what is left of the phone is still a
    // phone number beside the placeholder, and the next pass masks it.
    let policy = Policy {
        detectors: vec![Detector::Phone],
        custom: vec![("greet".into(), r"call 415".into())],
    };
    let r = Redactor::new(&policy, KEY_A).unwrap();
    let text = "call 415-555-0100";
    let out = r.redact(text);
    let got: Vec<(Kind, &str)> = out
        .findings
        .iter()
        .map(|f| (f.kind.clone(), &text[f.span.clone()]))
        .collect();
    assert_eq!(
        got,
        [
            (Kind::Custom("greet".into()), "call 415"),
            (Kind::Builtin(Detector::Phone), "555-0100"),
        ]
    );
}

#[test]
fn redaction_keeps_placeholders_and_is_idempotent_with_custom_neighbours() {
    let policy = Policy {
        detectors: Detector::ALL.to_vec(),
        custom: vec![
            ("secret".into(), r"secret".into()),
            ("word".into(), r"[A-Z]+".into()),
        ],
    };
    let r = Redactor::new(&policy, KEY_A).unwrap();
    // The phone is glued to a custom match: clean only once that is masked.
    let text = "5551234567secret and EMAIL";
    let once = r.redact(text);
    assert_eq!(once.findings.len(), 3, "{once:?}");
    let spans: Vec<&str> = once
        .findings
        .iter()
        .map(|f| &text[f.span.clone()])
        .collect();
    assert_eq!(spans, ["5551234567", "secret", "EMAIL"]);
    let twice = r.redact(&once.text);
    assert_eq!(twice.text, once.text);
    assert!(twice.findings.is_empty());
}

#[test]
fn redaction_policy_errors() {
    assert_eq!(
        Redactor::new(&Policy::all_built_in(), b"short").err(),
        Some(PolicyError::KeyTooShort(5))
    );
    let policy = Policy {
        detectors: vec![],
        custom: vec![("order".into(), "ORD-[".into())],
    };
    let err = Redactor::new(&policy, KEY_A).err().unwrap();
    assert!(
        err.to_string()
            .starts_with("custom pattern \"order\" is not a usable regular expression"),
        "{err}"
    );
}

#[test]
fn redaction_is_send_sync_and_hides_its_key() {
    fn shared<T: Send + Sync>() {}
    shared::<Redactor>();
    let debug = format!("{:?}", all(KEY_A));
    assert!(!debug.contains("project-a"), "{debug}");
}

#[test]
fn redaction_back_maps_spans() {
    let edits = [
        Edit {
            old_end: 5,
            new_end: 10,
        },
        Edit {
            old_end: 12,
            new_end: 30,
        },
    ];
    assert_eq!(back(&edits, 0), 0);
    assert_eq!(back(&edits, 10), 5);
    assert_eq!(back(&edits, 11), 6);
    assert_eq!(back(&edits, 30), 12);
    assert_eq!(back(&edits, 35), 17);
}

/// A Luhn-valid card number of `len` digits starting with `first`, from `body`.
fn luhn_card(first: u8, body: &[u8], len: usize) -> String {
    let mut digits: Vec<u8> = std::iter::once(first)
        .chain(body.iter().map(|d| d % 10))
        .take(len - 1)
        .collect();
    for check in 0..10 {
        digits.push(check);
        if luhn(digits.iter().map(|d| d + b'0')) {
            break;
        }
        digits.pop();
    }
    digits.iter().map(|d| char::from(d + b'0')).collect()
}

fn group(card: &str, sep: &str) -> String {
    card.as_bytes()
        .chunks(4)
        .map(|c| std::str::from_utf8(c).unwrap())
        .collect::<Vec<_>>()
        .join(sep)
}

/// Words of every shape the detectors look at, and plain ones.
fn word() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-zA-Z]{1,8}",
        1 => "[0-9]{1,12}",
        1 => "[a-z0-9.@:+()\\-]{1,10}",
        1 => Just("ann@example.com".to_string()),
        1 => Just("+1 (415) 555-0100".to_string()),
        1 => Just("4111 1111 1111 1111".to_string()),
        1 => Just("DE89 3704 0044 0532 0130 00".to_string()),
        1 => Just("10.0.0.1".to_string()),
        1 => Just("fe80::1".to_string()),
        1 => Just("2024-05-01".to_string()),
        1 => Just("[EMAIL_0123456789ab]".to_string()),
        1 => "[,.;!?]",
    ]
}

fn sentence() -> impl Strategy<Value = String> {
    prop::collection::vec(
        (word(), prop_oneof![Just(" "), Just(""), Just(", ")]),
        0..16,
    )
    .prop_map(|parts| parts.into_iter().map(|(w, s)| w + s).collect())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn redaction_is_idempotent(text in sentence()) {
        let policy = Policy {
            detectors: Detector::ALL.to_vec(),
            custom: vec![("code".into(), r"[A-Z]{3}\d".into())],
        };
        let r = Redactor::new(&policy, KEY_A).unwrap();
        let once = r.redact(&text);
        let twice = r.redact(&once.text);
        prop_assert_eq!(&twice.text, &once.text);
        prop_assert!(twice.findings.is_empty());
        // Spans are in order, disjoint and on the original text.
        let mut last = 0;
        for f in &once.findings {
            prop_assert!(last <= f.span.start && f.span.start < f.span.end && f.span.end <= text.len());
            last = f.span.end;
        }
    }

    #[test]
    fn redaction_is_idempotent_on_dense_punctuation(text in "[0-9 .+()@:\\[\\]a-fA-FxX_\\-]{0,60}") {
        let policy = Policy {
            detectors: Detector::ALL.to_vec(),
            custom: vec![("hex".into(), r"[a-f]{2}\d".into())],
        };
        let r = Redactor::new(&policy, KEY_A).unwrap();
        let once = r.redact(&text);
        let twice = r.redact(&once.text);
        prop_assert_eq!(&twice.text, &once.text);
    }

    #[test]
    fn redaction_finds_every_luhn_valid_card(
        before in prop::collection::vec("[a-zA-Z]{1,8}", 0..6),
        after in prop::collection::vec("[a-zA-Z]{1,8}", 0..6),
        first in 2u8..=6,
        body in prop::collection::vec(0u8..10, 18),
        len in 13usize..=19,
        sep in prop_oneof![Just(""), Just(" "), Just("-")],
    ) {
        let card = luhn_card(first, &body, len);
        let printed = if sep.is_empty() { card.clone() } else { group(&card, sep) };
        let text = format!("{} {} {}", before.join(" "), printed, after.join(" "));
        let out = all(KEY_A).redact(&text);
        prop_assert!(!out.text.contains(&printed), "{} -> {}", text, out.text);
        prop_assert!(!out.text.contains(&card));
        prop_assert!(out.findings.iter().any(|f| f.kind == Kind::Builtin(Detector::Card) && text[f.span.clone()] == printed), "{:?}", out.findings);
    }

    #[test]
    fn redaction_is_stable_per_key(
        user in "[a-z]{1,10}",
        domain in "[a-z]{1,10}",
        a in prop::collection::vec("[a-z]{1,8}", 0..5),
        b in prop::collection::vec("[a-z]{1,8}", 0..5),
    ) {
        let email = format!("{user}@{domain}.com");
        let one = format!("{} {} .", a.join(" "), email);
        let two = format!("{} {} !", b.join(" "), email.to_uppercase());
        let placeholder = |r: &Redactor, text: &str| {
            let out = r.redact(text);
            let start = out.text.find("[EMAIL_").unwrap();
            out.text[start..start + 7 + SUFFIX_HEX + 1].to_string()
        };
        let (ra, rb) = (all(KEY_A), all(KEY_B));
        prop_assert_eq!(placeholder(&ra, &one), placeholder(&ra, &two));
        prop_assert_eq!(placeholder(&rb, &one), placeholder(&rb, &two));
        prop_assert_ne!(placeholder(&ra, &one), placeholder(&rb, &one));
    }

    #[test]
    fn redaction_leaves_text_without_digits_at_or_colon(text in "[^0-9@:]{0,200}") {
        let out = all(KEY_A).redact(&text);
        prop_assert_eq!(&out.text, &text);
        prop_assert!(out.findings.is_empty());
    }
}
