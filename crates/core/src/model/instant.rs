//! One reading of an instant wherever a client gives one (message timestamps, filter
//! literals): RFC 3339, naive ISO (UTC), a date, or Unix seconds as a number or a string
//! of digits (milliseconds above 10^12), so the same instant is accepted in every form.

use chrono::{DateTime, NaiveDate, NaiveDateTime, Utc};

/// Unix seconds (or milliseconds, above 10^12) as a time.
pub fn from_unix(secs: f64) -> Option<DateTime<Utc>> {
    let secs = if secs.abs() > 1e12 {
        secs / 1000.0
    } else {
        secs
    };
    if !secs.is_finite() || secs.abs() > 1e11 {
        return None;
    }
    DateTime::from_timestamp_micros((secs * 1e6).round() as i64)
}

/// A time written as text: RFC 3339, naive ISO or a date (UTC), or Unix seconds.
pub fn parse(text: &str) -> Option<DateTime<Utc>> {
    let text = text.trim();
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Some(t.to_utc());
    }
    if let Ok(t) = NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S%.f") {
        return Some(t.and_utc());
    }
    if let Ok(d) = NaiveDate::parse_from_str(text, "%Y-%m-%d") {
        return d.and_hms_opt(0, 0, 0).map(|t| t.and_utc());
    }
    // Digits only (a sign and a fraction allowed): "1683554160" is a time, "2023" is not
    // a date either way.
    if !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_digit() || c == '.' || c == '-')
    {
        return text.parse::<f64>().ok().and_then(from_unix);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form_of_one_instant_is_the_same() {
        let at = parse("2023-05-08T13:56:00Z").unwrap();
        for form in [
            "2023-05-08T15:56:00+02:00",
            "2023-05-08T13:56:00",
            "1683554160",
            "1683554160000",
        ] {
            assert_eq!(parse(form), Some(at), "{form}");
        }
        assert_eq!(from_unix(1_683_554_160.0), Some(at));
        assert_eq!(from_unix(1_683_554_160_000.0), Some(at));
        assert_eq!(parse("yesterday"), None);
    }
}
