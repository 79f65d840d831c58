//! Digit groups joined by single separators ("+1 (415) 555-0100", "4111 1111 1111 1111"),
//! the shape phone and card numbers share. A chain is maximal; the detectors look for
//! the longest valid window of groups inside it, so "on 2024-05-01 call 555 0100" style
//! neighbours do not hide a number or glue two together.

/// One run of digits, or `(digits)` when parentheses are allowed.
pub(super) struct Group {
    /// Byte offsets of the group, parentheses included.
    pub start: usize,
    pub end: usize,
    pub digits: usize,
    pub paren: bool,
}

pub(super) struct Chain {
    /// Offset of a leading '+', when there is one.
    pub plus: Option<usize>,
    pub groups: Vec<Group>,
    /// `seps[k]` joins groups `k` and `k + 1` (0: none, after a parenthesised group).
    pub seps: Vec<u8>,
}

pub(super) struct Rules {
    pub seps: &'static [u8],
    pub parens: bool,
    pub plus: bool,
}

fn digit_at(bytes: &[u8], at: usize) -> bool {
    bytes.get(at).is_some_and(u8::is_ascii_digit)
}

fn alnum(c: Option<u8>) -> bool {
    c.is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_' || c >= 0x80)
}

/// True when a number may start at `at`: no word, number or path runs into it.
pub(super) fn clean_before(bytes: &[u8], at: usize) -> bool {
    let before = at.checked_sub(1).map(|i| bytes[i]);
    let before2 = at.checked_sub(2).map(|i| bytes[i]);
    match before {
        None => true,
        Some(b'.' | b'/' | b'\\' | b'+' | b'#') => false,
        Some(b'-' | b':' | b',') => !alnum(before2),
        c => !alnum(c),
    }
}

/// True when a number may end at `at`: no word, version, date or time continues it.
pub(super) fn clean_after(bytes: &[u8], at: usize) -> bool {
    let after = bytes.get(at).copied();
    match after {
        None => true,
        Some(b'.' | b'-' | b':' | b'/' | b',') => !alnum(bytes.get(at + 1).copied()),
        Some(b'@') => false,
        c => !alnum(c),
    }
}

/// Calls `f` with every maximal chain of `text`.
pub(super) fn chains(text: &str, rules: &Rules, mut f: impl FnMut(&Chain)) {
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let starts = b.is_ascii_digit()
            || (rules.parens && b == b'(' && digit_at(bytes, i + 1))
            || (rules.plus && b == b'+' && digit_at(bytes, i + 1));
        if !starts {
            i += 1;
            continue;
        }
        let (chain, end) = parse(bytes, i, rules);
        if let Some(chain) = chain {
            f(&chain);
        }
        i = end.max(i + 1);
    }
}

/// One group at `at`: its end, digits and whether parenthesised.
fn group(bytes: &[u8], at: usize, parens: bool) -> Option<(usize, usize, bool)> {
    if parens && bytes.get(at) == Some(&b'(') {
        let mut j = at + 1;
        while digit_at(bytes, j) {
            j += 1;
        }
        let digits = j - at - 1;
        return (digits > 0 && bytes.get(j) == Some(&b')')).then_some((j + 1, digits, true));
    }
    let mut j = at;
    while digit_at(bytes, j) {
        j += 1;
    }
    (j > at).then_some((j, j - at, false))
}

fn parse(bytes: &[u8], start: usize, rules: &Rules) -> (Option<Chain>, usize) {
    let mut at = start;
    let plus = (bytes[at] == b'+').then(|| {
        at += 1;
        start
    });
    let mut chain = Chain {
        plus,
        groups: Vec::new(),
        seps: Vec::new(),
    };
    while let Some((end, digits, paren)) = group(bytes, at, rules.parens) {
        chain.groups.push(Group {
            start: at,
            end,
            digits,
            paren,
        });
        at = end;
        let next = bytes.get(at).copied();
        let opens = |k: usize| {
            digit_at(bytes, k)
                || (rules.parens && bytes.get(k) == Some(&b'(') && digit_at(bytes, k + 1))
        };
        match next {
            Some(sep) if rules.seps.contains(&sep) && opens(at + 1) => {
                chain.seps.push(sep);
                at += 1;
            }
            Some(c) if paren && c.is_ascii_digit() => chain.seps.push(0),
            _ => break,
        }
    }
    if chain.groups.is_empty() {
        return (None, start + 1);
    }
    let end = chain.groups.last().map_or(at, |g| g.end);
    (Some(chain), end)
}

/// The longest windows `i..=j` of `chain` that `valid` accepts, left to right, with at
/// most `max_digits` digits: a window inside a chain begins and ends at a space, or at
/// the chain's clean ends.
pub(super) fn windows(
    text: &str,
    chain: &Chain,
    max_digits: usize,
    valid: impl Fn(&Chain, usize, usize) -> bool,
    mut emit: impl FnMut(usize, usize),
) {
    let bytes = text.as_bytes();
    let n = chain.groups.len();
    let mut i = 0;
    while i < n {
        let start = if i == 0 {
            chain.plus.unwrap_or(chain.groups[0].start)
        } else {
            chain.groups[i].start
        };
        let start_ok = if i == 0 {
            clean_before(bytes, start)
        } else {
            chain.seps[i - 1] == b' '
        };
        let mut best = None;
        if start_ok {
            let mut digits = 0;
            for j in i..n {
                digits += chain.groups[j].digits;
                if digits > max_digits {
                    break;
                }
                let end_ok = if j + 1 == n {
                    clean_after(bytes, chain.groups[j].end)
                } else {
                    chain.seps[j] == b' '
                };
                if end_ok && valid(chain, i, j) {
                    best = Some(j);
                }
            }
        }
        match best {
            Some(j) => {
                emit(start, chain.groups[j].end);
                i = j + 1;
            }
            None => i += 1,
        }
    }
}

/// The digits of `text[start..end]`.
pub(super) fn digits_of(text: &str, start: usize, end: usize) -> String {
    text[start..end]
        .chars()
        .filter(char::is_ascii_digit)
        .collect()
}
