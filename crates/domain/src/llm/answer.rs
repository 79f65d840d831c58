//! Reading what real models answer: the JSON object inside an answer wrapped in
//! reasoning blocks (`<think>…</think>`), code fences or prose, with trailing commas, or
//! cut off at the token limit (the whole elements of its lists before the cut are kept).

use std::borrow::Cow;

/// Tags of reasoning blocks that models put before (or around) their answer.
const REASONING_TAGS: [(&str, &str); 3] = [
    ("<think>", "</think>"),
    ("<thinking>", "</thinking>"),
    ("<reasoning>", "</reasoning>"),
];

/// Object starts tried in one answer: prose may hold braces before the JSON.
const MAX_STARTS: usize = 64;

/// `answer` without its reasoning blocks. A block left open (the answer was cut off
/// while reasoning) takes the rest of the answer with it.
pub fn without_reasoning(answer: &str) -> Cow<'_, str> {
    let lower = answer.to_ascii_lowercase();
    if !REASONING_TAGS
        .iter()
        .any(|(open, close)| lower.contains(open) || lower.contains(close))
    {
        return Cow::Borrowed(answer);
    }
    let mut out = String::with_capacity(answer.len());
    let mut at = 0;
    loop {
        let next = REASONING_TAGS
            .iter()
            .filter_map(|(open, close)| lower[at..].find(open).map(|i| (at + i, *open, *close)))
            .min_by_key(|(i, _, _)| *i);
        let Some((start, open, close)) = next else {
            out.push_str(&answer[at..]);
            break;
        };
        out.push_str(&answer[at..start]);
        match lower[start + open.len()..].find(close) {
            Some(end) => at = start + open.len() + end + close.len(),
            None => break,
        }
    }
    // A closing tag without its opening one (some templates put the opening tag in the
    // prompt): what comes before it is reasoning.
    for (_, close) in REASONING_TAGS {
        if let Some(end) = out.to_ascii_lowercase().rfind(close) {
            out = out[end + close.len()..].to_string();
        }
    }
    Cow::Owned(out)
}

/// How the JSON object was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    /// Whole (perhaps after taking out trailing commas).
    Whole,
    /// Cut off: its lists' whole elements before the cut, the rest closed.
    Salvaged,
}

/// The first JSON object in `answer` with `key` at its top level (else the first JSON
/// object at all, for the caller to say what it lacks). `Err` says why there is none, in
/// words the model can act on.
pub fn json_object(answer: &str, key: &str) -> Result<(serde_json::Value, Found), String> {
    let text = without_reasoning(answer);
    let text = text.as_ref();
    let mut first: Option<(serde_json::Value, Found)> = None;
    let mut last_error = None;
    for start in text
        .char_indices()
        .filter(|(_, c)| *c == '{')
        .map(|(i, _)| i)
        .take(MAX_STARTS)
    {
        let (value, found) = match scan(&text[start..]) {
            Scan::Whole(end) => match parse(&text[start..start + end]) {
                Ok(value) => (value, Found::Whole),
                Err(err) => {
                    last_error.get_or_insert(err);
                    continue;
                }
            },
            Scan::Cut(repaired) => match parse(&repaired) {
                Ok(value) => (value, Found::Salvaged),
                Err(err) => {
                    last_error.get_or_insert(err);
                    continue;
                }
            },
        };
        if !value.is_object() {
            continue;
        }
        if value.get(key).is_some() {
            return Ok((value, found));
        }
        first.get_or_insert((value, found));
    }
    first.ok_or_else(|| match last_error {
        Some(err) => format!("the answer holds no valid JSON object ({err})"),
        None if text.trim().is_empty() => "the answer is empty".to_string(),
        None => "the answer holds no JSON object".to_string(),
    })
}

/// Parses `text`, and again without trailing commas when that is what failed.
fn parse(text: &str) -> Result<serde_json::Value, String> {
    match serde_json::from_str(text) {
        Ok(value) => Ok(value),
        Err(first) => {
            serde_json::from_str(&without_trailing_commas(text)).map_err(|_| first.to_string())
        }
    }
}

/// `text` without the commas that directly precede a `}` or `]` (outside strings).
fn without_trailing_commas(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_string = false;
    let mut escaped = false;
    let mut pending_comma: Option<String> = None;
    for c in text.chars() {
        if in_string {
            out.push(c);
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        if let Some(held) = pending_comma.as_mut() {
            if c.is_whitespace() {
                held.push(c);
                continue;
            }
            let held = pending_comma.take().unwrap_or_default();
            if c == '}' || c == ']' {
                out.push_str(&held[1..]);
            } else {
                out.push_str(&held);
            }
        }
        match c {
            ',' => pending_comma = Some(",".to_string()),
            '"' => {
                in_string = true;
                out.push(c);
            }
            _ => out.push(c),
        }
    }
    if let Some(held) = pending_comma {
        out.push_str(&held);
    }
    out
}

enum Scan {
    /// The object ends at this byte offset (exclusive).
    Whole(usize),
    /// The text ends inside the object: repaired to its whole list elements and closed
    /// (empty when nothing whole was left).
    Cut(String),
}

/// Finds where the object starting at `text[0]` (a `{`) ends, minding strings.
fn scan(text: &str) -> Scan {
    let mut stack: Vec<char> = Vec::new();
    let mut in_string = false;
    let mut escaped = false;
    // The last point right after a whole element of a list, with the stack there.
    let mut last_whole: Option<(usize, Vec<char>)> = None;
    for (i, c) in text.char_indices() {
        if in_string {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '{' | '[' => stack.push(c),
            '}' | ']' => {
                let expected = if c == '}' { '{' } else { '[' };
                if stack.pop() != Some(expected) {
                    // Not JSON from here: nothing whole to find at this start.
                    return Scan::Cut(String::new());
                }
                if stack.is_empty() {
                    return Scan::Whole(i + 1);
                }
                if stack.last() == Some(&'[') {
                    last_whole = Some((i + 1, stack.clone()));
                }
            }
            _ => {}
        }
    }
    let Some((end, opened)) = last_whole else {
        return Scan::Cut(String::new());
    };
    let mut repaired = text[..end].to_string();
    for opener in opened.iter().rev() {
        repaired.push(if *opener == '{' { '}' } else { ']' });
    }
    Scan::Cut(repaired)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn commands(answer: &str) -> (serde_json::Value, Found) {
        json_object(answer, "commands").unwrap_or_else(|e| panic!("{e}: {answer}"))
    }

    #[test]
    fn reasoning_blocks_are_left_out() {
        assert_eq!(without_reasoning("plain"), "plain");
        assert_eq!(
            without_reasoning("<think>the user said {x}</think>\n{\"a\":1}").trim(),
            "{\"a\":1}"
        );
        assert_eq!(
            without_reasoning("<THINKING>a</THINKING>b<reasoning>c</reasoning>d"),
            "bd"
        );
        // Opened in the prompt's template, closed in the answer.
        assert_eq!(without_reasoning("I think {no}.</think>answer"), "answer");
        // Cut off while reasoning: nothing is left.
        assert_eq!(without_reasoning("<think>still going {"), "");
    }

    #[test]
    fn the_object_is_found_in_fences_prose_and_reasoning() {
        let want = json!({"commands": [{"command": "add"}]});
        for answer in [
            r#"{"commands":[{"command":"add"}]}"#,
            "```json\n{\"commands\":[{\"command\":\"add\"}]}\n```",
            "Sure! Here is the JSON {as asked}:\n{\"commands\":[{\"command\":\"add\"}]}\nHope it helps {:",
            "<think>They want {\"commands\": []}? No.</think>{\"commands\":[{\"command\":\"add\"}]}",
            "{\"note\":\"first\"} then {\"commands\":[{\"command\":\"add\"}]}",
            "{\"commands\":[{\"command\":\"add\",},],}",
            "{\"commands\":[{\"command\":\"add\"}]}} trailing }",
        ] {
            assert_eq!(commands(answer), (want.clone(), Found::Whole), "{answer}");
        }
        // Commas inside strings stay.
        assert_eq!(
            commands(r#"{"commands":["a, ]", "b,}",]}"#).0,
            json!({"commands": ["a, ]", "b,}"]})
        );
    }

    #[test]
    fn a_cut_off_answer_keeps_its_whole_elements() {
        let (value, found) = commands(
            r#"{"commands":[{"command":"add","tag":"a"},{"command":"add","tag":"b"},{"command":"add","ta"#,
        );
        assert_eq!(found, Found::Salvaged);
        assert_eq!(
            value,
            json!({"commands": [{"command": "add", "tag": "a"}, {"command": "add", "tag": "b"}]})
        );
        // Cut inside an element's own list: that element is not whole.
        let (value, _) = commands(
            r#"{"commands":[{"command":"add","messages":[1]},{"command":"add","messages":[1,2"#,
        );
        assert_eq!(
            value,
            json!({"commands": [{"command": "add", "messages": [1]}]})
        );
        // Nothing whole: an error the model can act on.
        assert!(json_object(r#"{"commands":[{"command":"ad"#, "commands").is_err());
        assert!(json_object("", "commands").unwrap_err().contains("empty"));
        assert!(json_object("no json here", "commands").is_err());
    }

    #[test]
    fn an_object_without_the_key_is_given_when_there_is_no_other() {
        let (value, _) = json_object("{\"facts\": []}", "commands").unwrap();
        assert_eq!(value, json!({"facts": []}));
        assert!(json_object("[1, 2]", "commands").is_err());
    }
}
