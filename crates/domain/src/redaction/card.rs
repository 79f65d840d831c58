//! Payment card numbers: 13 to 19 digits, grouped by one kind of separator (a space or
//! a dash) or none, starting with 2-6 (the networks' ranges: Mastercard 2/5, Amex and
//! Diners 3, Visa 4, Discover and UnionPay 6), and passing the Luhn check. A number
//! failing Luhn is not a card.

use super::Hit;
use super::chain::{Chain, Rules, chains, digits_of, windows};

const RULES: Rules = Rules {
    seps: b" -",
    parens: false,
    plus: false,
};

pub(super) fn find(text: &str, out: &mut Vec<Hit>) {
    chains(text, &RULES, |chain| {
        windows(
            text,
            chain,
            19,
            |c, i, j| valid(text, c, i, j),
            |start, end| {
                out.push(Hit {
                    start,
                    end,
                    norm: digits_of(text, start, end),
                });
            },
        );
    });
}

fn valid(text: &str, chain: &Chain, i: usize, j: usize) -> bool {
    let digits: usize = chain.groups[i..=j].iter().map(|g| g.digits).sum();
    if !(13..=19).contains(&digits) {
        return false;
    }
    if chain.seps[i..j].windows(2).any(|w| w[0] != w[1]) {
        return false;
    }
    let start = chain.groups[i].start;
    let end = chain.groups[j].end;
    if !matches!(text.as_bytes()[start], b'2'..=b'6') {
        return false;
    }
    luhn(text[start..end].bytes().filter(u8::is_ascii_digit))
}

/// The Luhn check over `digits` (ASCII), most significant first.
pub fn luhn(digits: impl DoubleEndedIterator<Item = u8>) -> bool {
    let mut sum = 0u32;
    for (k, d) in digits.rev().enumerate() {
        let mut d = u32::from(d - b'0');
        if k % 2 == 1 {
            d *= 2;
            if d > 9 {
                d -= 9;
            }
        }
        sum += d;
    }
    sum.is_multiple_of(10)
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
    fn redaction_card_positives() {
        for (text, want) in [
            ("visa 4111 1111 1111 1111 exp 12/27", "4111 1111 1111 1111"),
            ("4111-1111-1111-1111", "4111-1111-1111-1111"),
            ("mc 5500005555555559.", "5500005555555559"),
            ("amex 3782 822463 10005", "3782 822463 10005"),
            ("paid with 6011111111111117 yesterday", "6011111111111117"),
            ("visa13 4222222222222", "4222222222222"),
            ("2223 0031 2200 3222", "2223 0031 2200 3222"),
        ] {
            assert_eq!(found(text), vec![want.to_string()], "{text}");
        }
        // Another number right after the card stays out of it.
        assert_eq!(
            found("4111 1111 1111 1111 2027"),
            vec!["4111 1111 1111 1111".to_string()]
        );
    }

    #[test]
    fn redaction_card_near_misses() {
        for text in [
            "4111 1111 1111 1112",         // Luhn fails
            "4111111111111112",            // Luhn fails
            "4111-1111 1111-1111",         // mixed separators
            "ref 0000000000000000",        // not a network's range
            "tracking 1Z9999999999999999", // glued to a letter
            "41111111111",                 // too short
            "41111111111111111111111",     // too long
            "v4111111111111111",
            "4111111111111111.5",
        ] {
            assert!(found(text).is_empty(), "{text}: {:?}", found(text));
        }
    }

    #[test]
    fn redaction_luhn() {
        assert!(luhn(b"79927398713".iter().copied()));
        assert!(!luhn(b"79927398710".iter().copied()));
    }
}
