//! LoCoMo's annotated facts (`observation` → `session_N_observation` → speaker →
//! `[fact, evidence]`): what extraction should find, scored in [`super::facts`].

use std::collections::HashSet;

use serde_json::Value;

/// One annotated fact.
#[derive(Debug, Clone)]
pub struct Fact {
    pub speaker: String,
    pub text: String,
    /// Distinct `dia_id`s of its evidence turns, in order (never empty).
    pub evidence: Vec<String>,
}

/// The facts of one LoCoMo sample, sessions in numeric order. Evidence is cleaned up as
/// the questions' is, and more: an entry is a string or a list of strings, split on ';'
/// and on ',' (a few facts write "D22:21, D22:23"), trimmed; ids naming no turn of
/// `known` are dropped (returned), and a fact left with none too.
pub fn facts(sample: &Value, known: &HashSet<&str>) -> (Vec<Fact>, Vec<String>) {
    let (mut facts, mut dropped) = (Vec::new(), Vec::new());
    let Some(sessions) = sample["observation"].as_object() else {
        return (facts, dropped);
    };
    let mut sessions: Vec<(u32, &Value)> = sessions
        .iter()
        .filter_map(|(key, value)| {
            let n = key.strip_prefix("session_")?.strip_suffix("_observation")?;
            Some((n.parse().ok()?, value))
        })
        .collect();
    sessions.sort_by_key(|(n, _)| *n);
    for (_, speakers) in sessions {
        for (speaker, list) in speakers.as_object().into_iter().flatten() {
            for entry in list.as_array().into_iter().flatten() {
                let Some(text) = entry[0].as_str() else {
                    continue;
                };
                let entries: Vec<&str> = match &entry[1] {
                    Value::String(s) => vec![s.as_str()],
                    Value::Array(list) => list.iter().filter_map(Value::as_str).collect(),
                    _ => Vec::new(),
                };
                let mut evidence: Vec<String> = Vec::new();
                for id in entries.iter().flat_map(|e| e.split([';', ','])) {
                    let id = id.trim();
                    if !known.contains(id) {
                        dropped.push(id.to_string());
                    } else if !evidence.iter().any(|e| e == id) {
                        evidence.push(id.to_string());
                    }
                }
                if !evidence.is_empty() {
                    facts.push(Fact {
                        speaker: speaker.clone(),
                        text: text.to_string(),
                        evidence,
                    });
                }
            }
        }
    }
    (facts, dropped)
}

/// Keeps the facts all of whose evidence lies among `kept` turns (`--turns`).
pub fn within(facts: &mut Vec<Fact>, kept: &HashSet<&str>) {
    facts.retain(|f| f.evidence.iter().all(|id| kept.contains(id.as_str())));
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_facts_with_every_evidence_form_and_cuts_to_the_turns() {
        let sample = json!({"observation": {
            "session_2_observation": {"B": [["late", "D2:1"]]},
            "session_1_observation": {"A": [
                ["one", "D1:1"],
                ["two", "D1:2; D1:3"],
                ["list", ["D1:1", "D1:4, D2:1"]],
                ["ghost", "D9:9"],
            ]},
        }});
        let known: HashSet<&str> = ["D1:1", "D1:2", "D1:3", "D1:4", "D2:1"].into();
        let (mut facts, dropped) = super::facts(&sample, &known);
        let texts: Vec<&str> = facts.iter().map(|f| f.text.as_str()).collect();
        assert_eq!(texts, ["one", "two", "list", "late"]);
        assert_eq!(facts[1].evidence, ["D1:2", "D1:3"]);
        assert_eq!(facts[2].evidence, ["D1:1", "D1:4", "D2:1"]);
        assert_eq!(dropped, ["D9:9"]);
        // Multi-turn evidence counts only when every turn is kept.
        within(&mut facts, &["D1:1", "D1:2", "D1:4"].into());
        let texts: Vec<&str> = facts.iter().map(|f| f.text.as_str()).collect();
        assert_eq!(texts, ["one"]);
    }
}
