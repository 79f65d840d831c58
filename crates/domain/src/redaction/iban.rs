//! IBANs: a country code, two check digits and the BBAN, printed whole or in groups
//! separated by single spaces ("DE89 3704 0044 0532 0130 00"), upper or lower case,
//! passing the ISO 13616 mod-97 check. The length is the country's for the countries
//! below, otherwise 15 to 34 characters. Normalised to upper case without spaces.

use super::Hit;

/// IBAN lengths of the countries most often seen (SWIFT's IBAN registry).
const LENGTHS: &[(&[u8; 2], usize)] = &[
    (b"AD", 24),
    (b"AE", 23),
    (b"AT", 20),
    (b"BA", 20),
    (b"BE", 16),
    (b"BG", 22),
    (b"BH", 22),
    (b"BR", 29),
    (b"CH", 21),
    (b"CY", 28),
    (b"CZ", 24),
    (b"DE", 22),
    (b"DK", 18),
    (b"EE", 20),
    (b"ES", 24),
    (b"FI", 18),
    (b"FO", 18),
    (b"FR", 27),
    (b"GB", 22),
    (b"GI", 23),
    (b"GL", 18),
    (b"GR", 27),
    (b"HR", 21),
    (b"HU", 28),
    (b"IE", 22),
    (b"IL", 23),
    (b"IS", 26),
    (b"IT", 27),
    (b"KW", 30),
    (b"KZ", 20),
    (b"LB", 28),
    (b"LI", 21),
    (b"LT", 20),
    (b"LU", 20),
    (b"LV", 21),
    (b"MC", 27),
    (b"ME", 22),
    (b"MK", 19),
    (b"MT", 31),
    (b"MU", 30),
    (b"NL", 18),
    (b"NO", 15),
    (b"PK", 24),
    (b"PL", 28),
    (b"PT", 25),
    (b"QA", 29),
    (b"RO", 24),
    (b"RS", 22),
    (b"SA", 24),
    (b"SE", 24),
    (b"SI", 19),
    (b"SK", 24),
    (b"SM", 27),
    (b"TN", 24),
    (b"TR", 26),
    (b"UA", 29),
];

fn word(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c >= 0x80
}

pub(super) fn find(text: &str, out: &mut Vec<Hit>) {
    let bytes = text.as_bytes();
    let mut i = 0;
    while i + 4 <= bytes.len() {
        let starts = (i == 0 || !word(bytes[i - 1]))
            && bytes[i].is_ascii_alphabetic()
            && bytes[i + 1].is_ascii_alphabetic()
            && bytes[i].is_ascii_uppercase() == bytes[i + 1].is_ascii_uppercase()
            && bytes[i + 2].is_ascii_digit()
            && bytes[i + 3].is_ascii_digit();
        match starts.then(|| at(bytes, i)).flatten() {
            Some(hit) => {
                i = hit.end;
                out.push(hit);
            }
            None => i += 1,
        }
    }
}

/// The IBAN starting at `start`, if one does.
fn at(bytes: &[u8], start: usize) -> Option<Hit> {
    // Offsets of the IBAN's characters, skipping single spaces between groups.
    let mut chars = Vec::with_capacity(34);
    let mut j = start;
    while chars.len() < 34 && j < bytes.len() {
        if bytes[j].is_ascii_alphanumeric() {
            chars.push(j);
            j += 1;
        } else if bytes[j] == b' '
            && !chars.is_empty()
            && bytes.get(j + 1).is_some_and(u8::is_ascii_alphanumeric)
        {
            j += 1;
        } else {
            break;
        }
    }
    let country = [
        bytes[start].to_ascii_uppercase(),
        bytes[start + 1].to_ascii_uppercase(),
    ];
    let known = LENGTHS
        .iter()
        .find(|(c, _)| **c == country)
        .map(|&(_, l)| l);
    let lengths = match known {
        Some(l) => l..=l,
        None => 15..=34,
    };
    for len in lengths.rev() {
        if len > chars.len() {
            continue;
        }
        let end = chars[len - 1] + 1;
        if bytes.get(end).is_some_and(|&c| word(c)) {
            continue; // the IBAN would end inside a word
        }
        let norm: String = chars[..len]
            .iter()
            .map(|&k| bytes[k].to_ascii_uppercase() as char)
            .collect();
        if mod97(&norm) == 1 {
            return Some(Hit { start, end, norm });
        }
    }
    None
}

/// ISO 7064 mod 97-10 of the IBAN moved four characters left, letters as 10..=35.
fn mod97(iban: &str) -> u32 {
    let (head, tail) = iban.split_at(4);
    let mut rem = 0u32;
    for c in tail.bytes().chain(head.bytes()) {
        rem = match c {
            b'0'..=b'9' => (rem * 10 + u32::from(c - b'0')) % 97,
            _ => (rem * 100 + u32::from(c - b'A') + 10) % 97,
        };
    }
    rem
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
    fn redaction_iban_positives() {
        for (text, want) in [
            (
                "pay DE89 3704 0044 0532 0130 00 today",
                "DE89 3704 0044 0532 0130 00",
            ),
            ("IBAN: GB29NWBK60161331926819.", "GB29NWBK60161331926819"),
            (
                "FR14 2004 1010 0505 0001 3M02 606",
                "FR14 2004 1010 0505 0001 3M02 606",
            ),
            ("nl91abna0417164300", "nl91abna0417164300"),
            ("BE68 5390 0754 7034 and more", "BE68 5390 0754 7034"),
            ("NO93 8601 1117 947", "NO93 8601 1117 947"),
        ] {
            assert_eq!(found(text), vec![want.to_string()], "{text}");
        }
        let mut out = Vec::new();
        find("de89 3704 0044 0532 0130 00", &mut out);
        assert_eq!(out[0].norm, "DE89370400440532013000");
    }

    #[test]
    fn redaction_iban_near_misses() {
        for text in [
            "DE89 3704 0044 0532 0130 01", // check fails
            "DE89 3704 0044 0532 0130",    // too short for DE
            "XDE89370400440532013000",     // glued to a word
            "DE89370400440532013000X",     // runs on
            "De89370400440532013000",      // mixed-case country code
            "AB12 model number",
            "GB29NWBK6016133192681", // one short
        ] {
            assert!(found(text).is_empty(), "{text}: {:?}", found(text));
        }
    }
}
