//! Time in conversations, read without a model. A question may name a period ("in July
//! 2023", "on 13 October, 2023") or ask when something happened; a turn may say when
//! its event was, relative to when it was said ("yesterday", "two weeks ago"). Hybrid
//! ranking lifts the turns whose event falls in the question's period, and, for a
//! `when` question, the turns that carry a time at all: they are the ones that can
//! answer it (BENCHMARKS.md, issue 46).

use chrono::NaiveDate;

use super::tokenize::words;

const MONTHS: [&str; 12] = [
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
];
const WEEKDAYS: [&str; 7] = [
    "monday",
    "tuesday",
    "wednesday",
    "thursday",
    "friday",
    "saturday",
    "sunday",
];
/// Units of relative time, with their length in days (approximate for months, years).
const UNITS: [(&str, i32); 8] = [
    ("day", 1),
    ("days", 1),
    ("week", 7),
    ("weeks", 7),
    ("month", 30),
    ("months", 30),
    ("year", 365),
    ("years", 365),
];
/// Words that make the unit after them a time ("last week", "this summer").
const RELATIVE: [&str; 6] = ["last", "next", "this", "past", "coming", "other"];
/// Units that only say when after such a word.
const SPANS: [&str; 8] = [
    "weekend", "night", "morning", "evening", "summer", "winter", "spring", "fall",
];
/// Words that are a time on their own.
const DEICTIC: [&str; 6] = [
    "yesterday",
    "today",
    "tonight",
    "tomorrow",
    "recently",
    "ago",
];
const NUMBERS: [(&str, i32); 13] = [
    ("a", 1),
    ("an", 1),
    ("one", 1),
    ("two", 2),
    ("three", 3),
    ("four", 4),
    ("five", 5),
    ("six", 6),
    ("seven", 7),
    ("eight", 8),
    ("nine", 9),
    ("ten", 10),
    ("few", 3),
];

/// A span of time, in microseconds since the epoch (UTC), end exclusive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Period {
    pub start: i64,
    pub end: i64,
}

impl Period {
    /// Whether `micros` falls within the period widened by `slack_days` on both sides.
    pub fn holds(&self, micros: i64, slack_days: i64) -> bool {
        let slack = slack_days * DAY_MICROS;
        micros >= self.start - slack && micros < self.end + slack
    }
}

const DAY_MICROS: i64 = 86_400_000_000;

/// What a turn says of time: whether it names one, and how many days from when it was
/// said its event lies (0 when it does not say).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TurnTime {
    pub mentions_time: bool,
    pub offset_days: i16,
}

impl TurnTime {
    /// When the turn's event was, said at `said_micros`.
    pub fn event_micros(&self, said_micros: i64) -> i64 {
        said_micros + i64::from(self.offset_days) * DAY_MICROS
    }
}

fn month(word: &str) -> Option<u32> {
    MONTHS.iter().position(|m| *m == word).map(|i| i as u32 + 1)
}

fn year(word: &str) -> Option<i32> {
    let y: i32 = word.parse().ok().filter(|_| word.len() == 4)?;
    (1900..=2100).contains(&y).then_some(y)
}

/// A day of the month: "13", "1st", "22nd".
fn day(word: &str) -> Option<u32> {
    let digits = word.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let suffix = &word[digits.len()..];
    if digits.is_empty() || digits.len() > 2 || !matches!(suffix, "" | "st" | "nd" | "rd" | "th") {
        return None;
    }
    digits.parse().ok().filter(|d| (1..=31).contains(d))
}

fn number(word: &str) -> Option<i32> {
    if let Ok(n) = word.parse::<i32>() {
        return (0..=1000).contains(&n).then_some(n);
    }
    NUMBERS.iter().find(|(w, _)| *w == word).map(|(_, n)| *n)
}

fn micros(date: NaiveDate) -> i64 {
    date.and_hms_opt(0, 0, 0)
        .map_or(0, |t| t.and_utc().timestamp_micros())
}

/// The period a question names: the months (with a day when given) it mentions, of the
/// year given with them or elsewhere in the question, spanning from the first to the
/// last; else a year it names. A reference point ("as of May 2023") is not a period.
pub fn question_period(query: &str) -> Option<Period> {
    let words: Vec<String> = words(query).collect();
    let mut skip = vec![false; words.len()];
    for i in 0..words.len().saturating_sub(1) {
        if words[i] == "as" && words[i + 1] == "of" {
            for s in skip.iter_mut().skip(i).take(5) {
                *s = true;
            }
        }
    }
    let kept: Vec<&str> = words
        .iter()
        .zip(&skip)
        .filter(|(_, s)| !**s)
        .map(|(w, _)| w.as_str())
        .collect();
    let any_year = kept.iter().find_map(|w| year(w));
    let mut spans: Vec<(NaiveDate, NaiveDate)> = Vec::new();
    for (i, word) in kept.iter().enumerate() {
        let Some(m) = month(word) else { continue };
        let before = i.checked_sub(1).and_then(|p| day(kept[p]));
        let after = kept.get(i + 1).and_then(|w| day(w));
        let given_year = kept[i + 1..].iter().take(3).find_map(|w| year(w));
        // "may" is a month only beside a day or a year.
        if *word == "may" && before.is_none() && after.is_none() && given_year.is_none() {
            continue;
        }
        let Some(y) = given_year.or(any_year) else {
            continue;
        };
        let span = match before.or(after) {
            Some(d) => NaiveDate::from_ymd_opt(y, m, d).map(|s| (s, s.succ_opt().unwrap_or(s))),
            None => NaiveDate::from_ymd_opt(y, m, 1).map(|s| {
                let next = if m == 12 {
                    NaiveDate::from_ymd_opt(y + 1, 1, 1)
                } else {
                    NaiveDate::from_ymd_opt(y, m + 1, 1)
                };
                (s, next.unwrap_or(s))
            }),
        };
        spans.extend(span);
    }
    let (start, end) = match (
        spans.iter().map(|s| s.0).min(),
        spans.iter().map(|s| s.1).max(),
    ) {
        (Some(start), Some(end)) => (start, end),
        _ => {
            let y = any_year?;
            (
                NaiveDate::from_ymd_opt(y, 1, 1)?,
                NaiveDate::from_ymd_opt(y + 1, 1, 1)?,
            )
        }
    };
    Some(Period {
        start: micros(start),
        end: micros(end),
    })
}

/// Whether a question asks when something happened ("When did …", "What year …",
/// "How long ago …").
pub fn asks_when(query: &str) -> bool {
    let words: Vec<String> = words(query).take(12).collect();
    if words.first().is_some_and(|w| w == "when") {
        return true;
    }
    words.windows(2).any(|pair| {
        let (a, b) = (pair[0].as_str(), pair[1].as_str());
        (matches!(a, "what" | "which") && matches!(b, "year" | "month" | "date" | "day" | "time"))
            || (a == "how" && b == "long")
            || (a == "when" && matches!(b, "did" | "was" | "is" | "will" | "does" | "do"))
    })
}

/// What `content`, said at some time, says of when its event was.
pub fn turn_time(content: &str) -> TurnTime {
    let words: Vec<String> = words(content).collect();
    let mut time = TurnTime::default();
    let mut offset: Option<i32> = None;
    for (i, word) in words.iter().enumerate() {
        let w = word.as_str();
        let next = words.get(i + 1).map(String::as_str).unwrap_or("");
        let unit = |u: &str| UNITS.iter().find(|(n, _)| *n == u).map(|(_, d)| *d);
        if DEICTIC.contains(&w) || WEEKDAYS.contains(&w) || year(w).is_some() {
            time.mentions_time = true;
        }
        if month(w).is_some() && (w != "may" || day(next).is_some() || year(next).is_some()) {
            time.mentions_time = true;
        }
        if RELATIVE.contains(&w)
            && (unit(next).is_some() || SPANS.contains(&next) || WEEKDAYS.contains(&next))
        {
            time.mentions_time = true;
        }
        if offset.is_some() {
            continue;
        }
        offset = match (w, next) {
            ("yesterday", _) | ("last", "night") => Some(-1),
            ("tomorrow", _) => Some(1),
            ("last", "week" | "weekend") => Some(-7),
            ("next", "week" | "weekend") => Some(7),
            ("last", "month") => Some(-30),
            ("next", "month") => Some(30),
            ("last", "year") => Some(-365),
            ("next", "year") => Some(365),
            _ => match (number(w), unit(next), words.get(i + 2).map(String::as_str)) {
                (Some(n), Some(days), Some("ago")) => Some(-n * days),
                _ => None,
            },
        };
    }
    time.offset_days = offset.unwrap_or(0).clamp(-3650, 3650) as i16;
    time
}

#[cfg(test)]
mod tests {
    use super::*;

    fn date(y: i32, m: u32, d: u32) -> i64 {
        micros(NaiveDate::from_ymd_opt(y, m, d).unwrap())
    }

    #[test]
    fn questions_name_months_days_and_years() {
        let july = question_period("What did Mel paint in July 2023?").unwrap();
        assert_eq!((july.start, july.end), (date(2023, 7, 1), date(2023, 8, 1)));
        let day = question_period("What did she show on October 13, 2023?").unwrap();
        assert_eq!(
            (day.start, day.end),
            (date(2023, 10, 13), date(2023, 10, 14))
        );
        let day_first = question_period("What did Gina find on 1 February, 2023?").unwrap();
        assert_eq!(day_first.start, date(2023, 2, 1));
        let span = question_period("Where was John between August 11 and August 15 2023?").unwrap();
        assert_eq!(
            (span.start, span.end),
            (date(2023, 8, 11), date(2023, 8, 16))
        );
        let december = question_period("What happened in December 2023?").unwrap();
        assert_eq!(december.end, date(2024, 1, 1));
        let year = question_period("How many times has she gone to the beach in 2023?").unwrap();
        assert_eq!((year.start, year.end), (date(2023, 1, 1), date(2024, 1, 1)));
    }

    #[test]
    fn no_period_without_a_year_or_for_a_reference_point() {
        assert_eq!(question_period("What did Mel paint in July?"), None);
        assert_eq!(question_period("What may Caroline do next?"), None);
        assert_eq!(
            question_period("How many pets will Andrew have, as of December 2023?"),
            None
        );
        assert_eq!(
            question_period("Who is 2023-born?").map(|p| p.start),
            Some(date(2023, 1, 1))
        );
    }

    #[test]
    fn when_questions() {
        assert!(asks_when("When did Caroline go to the support group?"));
        assert!(asks_when("In what year did she move?"));
        assert!(asks_when("How long ago was the trip?"));
        assert!(!asks_when("What did Caroline research?"));
        assert!(!asks_when("Whenever"));
    }

    #[test]
    fn turns_say_when_their_event_was() {
        let t = turn_time("I went to a support group yesterday, it was great");
        assert_eq!(
            t,
            TurnTime {
                mentions_time: true,
                offset_days: -1
            }
        );
        assert_eq!(turn_time("We adopted him two weeks ago!").offset_days, -14);
        assert_eq!(
            turn_time("Back 3 years ago I lived in Sweden").offset_days,
            -1095
        );
        assert!(turn_time("Let's paint next Saturday").mentions_time);
        assert_eq!(turn_time("Let's paint next Saturday").offset_days, 0);
        assert_eq!(turn_time("I finished a project last week").offset_days, -7);
        assert_eq!(turn_time("You may like it, thanks!"), TurnTime::default());
        assert!(turn_time("We met in May 2021").mentions_time);
        let said = date(2023, 5, 8);
        assert_eq!(turn_time("yesterday").event_micros(said), date(2023, 5, 7));
        assert!(
            Period {
                start: date(2023, 5, 1),
                end: date(2023, 6, 1)
            }
            .holds(date(2023, 6, 5), 10)
        );
        assert!(
            !Period {
                start: date(2023, 5, 1),
                end: date(2023, 6, 1)
            }
            .holds(date(2023, 6, 12), 10)
        );
    }
}
