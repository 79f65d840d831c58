//! Phone numbers: international `+CC` forms and national forms with separators
//! ("+44 20 7946 0958", "(415) 555-0100", "06 12 34 56 78", "555.123.4567"), 7 to 15
//! digits (E.164's maximum). A bare run of digits is a phone only at 10 or 11 digits
//! (or after '+'); shorter bare runs are amounts and ids far more often. Dates
//! ("2024-05-01", "01/05/2024"), times ("10:30"), version numbers ("1.22.3"), IPv4
//! addresses, years ("2019 2020") and thousands ("1 000 000") are not phones.

use super::Hit;
use super::chain::{Chain, Rules, chains, digits_of, windows};

const RULES: Rules = Rules {
    seps: b" -.",
    parens: true,
    plus: true,
};

pub(super) fn find(text: &str, out: &mut Vec<Hit>) {
    chains(text, &RULES, |chain| {
        windows(
            text,
            chain,
            15,
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
    let groups = &chain.groups[i..=j];
    let seps = &chain.seps[i..j];
    let plus = i == 0 && chain.plus.is_some();
    let digits: usize = groups.iter().map(|g| g.digits).sum();
    if !(7..=15).contains(&digits) {
        return false;
    }
    let paren = groups.iter().any(|g| g.paren);
    // At most one one-digit group, and only first ("1-800-555-0199").
    if groups.iter().skip(1).any(|g| g.digits == 1) {
        return false;
    }
    if plus || paren {
        return true;
    }
    let lens: Vec<usize> = groups.iter().map(|g| g.digits).collect();
    if lens.len() == 1 {
        return (10..=11).contains(&digits);
    }
    let dotted = seps.contains(&b'.');
    if dotted && (lens[0] == 1 || (lens.len() == 4 && lens.iter().all(|&l| l <= 3))) {
        return false; // a version number or an IPv4 address
    }
    let same_sep = seps.windows(2).all(|w| w[0] == w[1]);
    if lens.len() == 3 && same_sep {
        let date = matches!(
            (lens[0], lens[1], lens[2]),
            (4, 1..=2, 1..=2) | (1..=2, 1..=2, 4)
        );
        if date {
            return false;
        }
    }
    // Years side by side.
    if groups.iter().all(|g| {
        g.digits == 4
            && text[g.start..g.end]
                .parse::<u16>()
                .is_ok_and(|y| (1900..=2099).contains(&y))
    }) {
        return false;
    }
    // Thousands: "1 000 000", "12 345 678".
    if lens.len() >= 3 && lens[0] < 3 && lens[1..].iter().all(|&l| l == 3) {
        return false;
    }
    true
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
    fn redaction_phone_positives() {
        for (text, want) in [
            ("call me on +44 20 7946 0958 tonight", "+44 20 7946 0958"),
            ("my cell is (415) 555-0100.", "(415) 555-0100"),
            ("ring 415-555-0100, ok?", "415-555-0100"),
            ("555.123.4567", "555.123.4567"),
            ("1-800-555-0199 is toll free", "1-800-555-0199"),
            ("Handy: +49 151 23456789", "+49 151 23456789"),
            ("+4915123456789", "+4915123456789"),
            ("appelle au 06 12 34 56 78 stp", "06 12 34 56 78"),
            ("text 5551234567 when there", "5551234567"),
            ("office 020 7946 0958", "020 7946 0958"),
            ("local 555 1234", "555 1234"),
            ("+1 (415) 555-0100", "+1 (415) 555-0100"),
        ] {
            assert_eq!(found(text), vec![want.to_string()], "{text}");
        }
        // A date beside a number hides neither.
        assert_eq!(
            found("on 2024-05-01 call 415-555-0100"),
            vec!["415-555-0100".to_string()]
        );
    }

    #[test]
    fn redaction_phone_near_misses() {
        for text in [
            "born 2024-05-01",
            "on 01/05/2024 at 10:30",
            "meet 12.05.2024",
            "version 1.22.3",
            "upgrade to 10.2.15.3001",
            "host 192.168.1.10",
            "from 2019 2020 2021",
            "it cost 1 000 000 dollars",
            "population 12 345 678",
            "order 1234567",
            "id 123456789",
            "1 2 3 4 5 6 7 8",
            "ref ABC5551234567",
            "x5551234567",
            "file 555-123-4567.pdf",
            "sku 415-555-0100-22-a",
            "year 1999",
        ] {
            assert!(found(text).is_empty(), "{text}: {:?}", found(text));
        }
        assert_eq!(found("12:30:45 5551234"), Vec::<String>::new());
    }
}
