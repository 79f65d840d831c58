//! IP addresses. IPv4: four dotted decimal octets, each at most 255, not part of a longer
//! dotted number ("1.2.3.4.5") or a word. IPv6: a run of hex digits, ':' and '.' with
//! at least two colons that `std::net::Ipv6Addr` parses ("2001:db8::1",
//! "::ffff:192.0.2.1"); times ("10:30:45") and MAC addresses do not parse. Both are
//! normalised to their canonical `std` form.

use std::net::{Ipv4Addr, Ipv6Addr};

use super::Hit;

fn word(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c >= 0x80
}

pub(super) fn find_v4(text: &str, out: &mut Vec<Hit>) {
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if !bytes[i].is_ascii_digit() {
            i += 1;
            continue;
        }
        // The dotted run of digits starting here.
        let mut j = i;
        while j < bytes.len()
            && (bytes[j].is_ascii_digit()
                || (bytes[j] == b'.' && bytes.get(j + 1).is_some_and(u8::is_ascii_digit)))
        {
            j += 1;
        }
        let before_ok = i == 0 || !(word(bytes[i - 1]) || bytes[i - 1] == b'.');
        let after_ok = j == bytes.len() || !word(bytes[j]);
        if before_ok
            && after_ok
            && let Ok(ip) = text[i..j].parse::<Ipv4Addr>()
        {
            out.push(Hit {
                start: i,
                end: j,
                norm: ip.to_string(),
            });
        }
        i = j;
    }
}

pub(super) fn find_v6(text: &str, out: &mut Vec<Hit>) {
    if !text.contains(':') {
        return;
    }
    let bytes = text.as_bytes();
    let in_run = |c: u8| c.is_ascii_hexdigit() || c == b':' || c == b'.';
    let mut i = 0;
    while i < bytes.len() {
        if !in_run(bytes[i]) {
            i += 1;
            continue;
        }
        let mut j = i;
        while j < bytes.len() && in_run(bytes[j]) {
            j += 1;
        }
        let run = &text[i..j];
        let before_ok = i == 0 || !word(bytes[i - 1]);
        if before_ok && run.bytes().filter(|&c| c == b':').count() >= 2 {
            // A sentence may end right after the address: try without trailing dots,
            // then without a lone trailing colon.
            let no_dots = i + run.trim_end_matches('.').len();
            let no_colon = if text[i..no_dots].ends_with(':') && !text[i..no_dots].ends_with("::") {
                no_dots - 1
            } else {
                no_dots
            };
            let after_ok = j == bytes.len() || !word(bytes[j]);
            if after_ok
                && let Some((end, ip)) = [j, no_dots, no_colon]
                    .into_iter()
                    .find_map(|end| text[i..end].parse::<Ipv6Addr>().ok().map(|ip| (end, ip)))
            {
                out.push(Hit {
                    start: i,
                    end,
                    norm: ip.to_string(),
                });
            }
        }
        i = j;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(text: &str) -> Vec<(String, String)> {
        let mut out = Vec::new();
        find_v4(text, &mut out);
        find_v6(text, &mut out);
        out.iter()
            .map(|h| (text[h.start..h.end].to_string(), h.norm.clone()))
            .collect()
    }

    fn spans(text: &str) -> Vec<String> {
        found(text).into_iter().map(|(s, _)| s).collect()
    }

    #[test]
    fn redaction_ip_positives() {
        for (text, want) in [
            ("ssh to 192.168.1.10 now", "192.168.1.10"),
            ("gateway 10.0.0.1.", "10.0.0.1"),
            ("(255.255.255.255)", "255.255.255.255"),
            ("host 2001:db8::1 is up", "2001:db8::1"),
            ("at fe80::1.", "fe80::1"),
            (
                "v6 2001:0DB8:0000:0000:0000:0000:0000:0001",
                "2001:0DB8:0000:0000:0000:0000:0000:0001",
            ),
            ("loopback ::1", "::1"),
        ] {
            assert_eq!(spans(text), vec![want.to_string()], "{text}");
        }
        assert_eq!(
            found("2001:0DB8:0:0:0:0:0:1")[0].1,
            "2001:db8::1",
            "canonical form"
        );
    }

    #[test]
    fn redaction_ip_near_misses() {
        for text in [
            "256.1.1.1",
            "1.2.3",
            "1.2.3.4.5",
            "v1.2.3.4",
            "at 10:30:45",
            "mac 00:1a:2b:3c:4d:5e",
            "ratio 3:2",
            "cafe::beefy",
            "see note: dead beef",
            "x::1",
        ] {
            assert!(spans(text).is_empty(), "{text}: {:?}", spans(text));
        }
    }
}
