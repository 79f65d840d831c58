//! What the language model is asked and how its answers are read: extraction commands,
//! consolidation and summaries, in the JSON shapes the contract fixes. Answers are
//! validated before anything is applied; a validation error is shown to the model when
//! it is asked again.

use serde::Deserialize;
use serde_json::json;

use super::categories::Effective;
use super::model::Feature;
use crate::llm::ordered::PROPERTY_ORDERING;
use crate::llm::{ChatMessage, Role};
use crate::model::Episode;

/// Longest feature name and value accepted from the model, in characters.
const MAX_NAME_CHARS: usize = 200;
const MAX_VALUE_CHARS: usize = 2000;
/// Most commands one answer may give.
const MAX_COMMANDS: usize = 200;

fn system(content: String) -> ChatMessage {
    ChatMessage {
        role: Role::System,
        content,
    }
}

fn user(content: String) -> ChatMessage {
    ChatMessage {
        role: Role::User,
        content,
    }
}

/// The messages of a batch, numbered from 1, each message's text verbatim on its own
/// line after a header line naming its number, speaker and date (so that "yesterday"
/// can be dated, and facts about events keep when they happened).
fn numbered(messages: &[&Episode]) -> String {
    let mut out = String::new();
    for (i, episode) in messages.iter().enumerate() {
        out.push_str(&format!(
            "[{}] {} ({}, {}):\n",
            i + 1,
            episode.producer_id,
            role(episode),
            date(episode)
        ));
        out.push_str(&episode.content);
        out.push('\n');
    }
    out
}

/// The day a message was sent, e.g. `2023-05-08`.
fn date(episode: &Episode) -> String {
    chrono::DateTime::from_timestamp_micros(episode.created_at_micros)
        .map_or_else(String::new, |t| t.format("%Y-%m-%d").to_string())
}

fn role(episode: &Episode) -> &str {
    if episode.producer_role.is_empty() {
        "user"
    } else {
        &episode.producer_role
    }
}

/// A context message on one line, cut to a few hundred characters.
fn one_line(text: &str) -> String {
    const MAX_CONTEXT_CHARS: usize = 500;
    let joined = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match joined.char_indices().nth(MAX_CONTEXT_CHARS) {
        Some((at, _)) => format!("{}…", &joined[..at]),
        None => joined,
    }
}

/// A worked example shown in the extraction prompt: what came before, the message, and
/// the commands that answer it (`tag`, `feature`, `value`; none: nothing to remember).
struct Example {
    before: Option<(&'static str, &'static str)>,
    date: &'static str,
    text: &'static str,
    commands: &'static [(&'static str, &'static str, &'static str)],
}

/// General examples, none about any data set's people or topics. Small models copy the
/// message into the value and cite every message unless shown otherwise; the empty
/// answers teach them to skip small talk.
const EXAMPLES: &[Example] = &[
    Example {
        before: Some(("Kim", "How was your weekend?")),
        date: "2022-03-14",
        text: "Great! We finally adopted a kitten last Saturday, her name is Luna.",
        commands: &[(
            "relationships",
            "pet",
            "Sam adopted a kitten named Luna on 12 March 2022.",
        )],
    },
    Example {
        before: None,
        date: "2022-03-15",
        text: "Haha yes, totally agree! Talk soon :)",
        commands: &[],
    },
    Example {
        before: Some(("Kim", "Any news?")),
        date: "2022-03-20",
        text: "I'm starting as a pharmacist in Leeds next month, so excited!",
        commands: &[(
            "work and skills",
            "job",
            "Sam starts working as a pharmacist in Leeds in April 2022.",
        )],
    },
    Example {
        before: None,
        date: "2022-03-21",
        text: "That's so sweet of you! What made you pick that one?",
        commands: &[],
    },
    Example {
        before: Some(("Kim", "Do you still do pottery?")),
        date: "2022-04-02",
        text: "Not anymore. These days it's rock climbing twice a week with my brother Tom.",
        commands: &[(
            "preferences",
            "hobby",
            "Sam goes rock climbing twice a week with his brother Tom, no longer pottery.",
        )],
    },
];

/// The examples a category can use: those whose tags it has (all when it names none).
fn examples(tags: &[(String, String)]) -> String {
    let known = |tag: &str| tags.is_empty() || tags.iter().any(|(name, _)| name == tag);
    let mut out = String::new();
    let usable = EXAMPLES
        .iter()
        .filter(|e| e.commands.iter().all(|(tag, _, _)| known(tag)));
    for (i, example) in usable.enumerate() {
        out.push_str(&format!("\n\nExample {}.\n", i + 1));
        if let Some((speaker, text)) = example.before {
            out.push_str(&format!(
                "## Earlier messages (context only: remember nothing from them)\n- {speaker} (user): {text}\n\n"
            ));
        }
        out.push_str(&format!(
            "## New messages\n[1] Sam (user, {}):\n{}\n",
            example.date, example.text
        ));
        let commands: Vec<serde_json::Value> = example
            .commands
            .iter()
            .map(|(tag, feature, value)| {
                json!({"command": "add", "messages": [1], "tag": tag, "feature": feature, "value": value})
            })
            .collect();
        out.push_str(&format!("Answer: {}", json!({ "commands": commands })));
    }
    out
}

/// The extraction request for one category over a batch; `context` holds earlier
/// messages the batch answers, shown in a section of their own before it.
pub fn extraction(
    category: &Effective,
    current: &[&Feature],
    context: &[&Episode],
    messages: &[&Episode],
) -> Vec<ChatMessage> {
    let tags = if category.tags.is_empty() {
        "Choose short, general tags.".to_string()
    } else {
        let list: Vec<String> = category
            .tags
            .iter()
            .map(|(name, description)| format!("- {name}: {description}"))
            .collect();
        format!("Use only these tags:\n{}", list.join("\n"))
    };
    let system_prompt = format!(
        "You maintain the \"{name}\" memory of a conversation.\n{prompt}\n\n{tags}\n\n\
         Answer with JSON only: {{\"commands\":[...]}}, one command per fact, each \
         {{\"command\":\"add\"|\"update\"|\"delete\",\"messages\":[1],\"tag\":\"...\",\
         \"feature\":\"...\",\"value\":\"...\"}}.\n\
         - command: add a new fact; update a current feature (same tag and feature) whose \
         value changed; delete a current feature the messages show is no longer true.\n\
         - messages: the numbers of the new messages that state the fact.\n\
         - feature: one to three words naming what the fact is about.\n\
         - value: at most 20 words, in the third person, starting with the person's name; \
         keep names, places, numbers and dates, dating events from the message's date \
         (\"yesterday\" in a message of 2023-05-08 is 7 May 2023); never copy the message.\n\
         - Skip greetings, thanks, questions and small talk: then answer {{\"commands\":[]}}.\
         {examples}",
        name = category.name,
        prompt = category.prompt,
        examples = examples(&category.tags),
    );
    let features: Vec<serde_json::Value> = current
        .iter()
        .map(|f| json!({"tag": f.tag, "feature": f.feature, "value": f.value}))
        .collect();
    let earlier = if context.is_empty() {
        String::new()
    } else {
        let lines: Vec<String> = context
            .iter()
            .map(|e| {
                format!(
                    "- {} ({}): {}",
                    e.producer_id,
                    role(e),
                    one_line(&e.content)
                )
            })
            .collect();
        format!(
            "## Earlier messages (context only: remember nothing from them)\n{}\n\n",
            lines.join("\n")
        )
    };
    let user_prompt = format!(
        "## Current features\n{}\n\n{earlier}## New messages\n{}",
        serde_json::Value::Array(features),
        numbered(messages)
    );
    vec![system(system_prompt), user(user_prompt)]
}

/// The JSON schema of an extraction answer for a batch of `batch_len` messages and a
/// category with these tags (empty: any). Endpoints that turn a schema into a grammar
/// (llama.cpp) then cannot answer a tag the category lacks, a message number outside
/// the batch, an empty value or an endless list, which small models otherwise do.
pub fn extraction_schema(
    tags: &[(String, String)],
    batch_len: usize,
) -> (String, serde_json::Value) {
    let tag = if tags.is_empty() {
        json!({"type": "string", "minLength": 1})
    } else {
        let names: Vec<&str> = tags.iter().map(|(name, _)| name.as_str()).collect();
        json!({"type": "string", "enum": names})
    };
    let max_commands = (batch_len * 4).clamp(8, MAX_COMMANDS);
    (
        "semantic_commands".into(),
        json!({
            "type": "object",
            "properties": {"commands": {"type": "array", "maxItems": max_commands, "items": {
                "type": "object",
                "properties": {
                    "command": {"type": "string", "enum": ["add", "update", "delete"]},
                    // An enum, not minimum and maximum: llama-cpp-python's grammar
                    // leaves integer ranges out.
                    "messages": {"type": "array", "minItems": 1, "items": {
                        "type": "integer", "enum": (1..=batch_len.max(1)).collect::<Vec<_>>()
                    }},
                    "tag": tag,
                    // No maxLength: llama.cpp's grammar would repeat a rule thousands of
                    // times, which llama-cpp-python refuses by dying. Lengths are checked
                    // on the answer.
                    "feature": {"type": "string", "minLength": 1},
                    "value": {"type": "string", "minLength": 1}
                },
                "required": ["command", "messages", "tag", "feature", "value"],
                // The message before the text it justifies: small models then cite
                // the message they describe.
                (PROPERTY_ORDERING): ["command", "messages", "tag", "feature", "value"]
            }}},
            "required": ["commands"]
        }),
    )
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommandKind {
    Add,
    Update,
    Delete,
}

/// One validated command.
#[derive(Debug, Clone, PartialEq)]
pub struct Command {
    pub kind: CommandKind,
    pub tag: String,
    pub feature: String,
    pub value: String,
    /// 0-based indices into the batch; empty: the whole batch.
    pub messages: Vec<usize>,
}

#[derive(Deserialize)]
struct RawCommands {
    commands: Vec<serde_json::Value>,
}

/// The JSON object of an answer with `key`, wherever the model put it (see
/// [`crate::llm::answer`]); a cut-off answer's whole commands are kept.
fn json_part(answer: &str, key: &str) -> Result<serde_json::Value, String> {
    crate::llm::answer::json_object(answer, key).map(|(value, found)| {
        if found == crate::llm::answer::Found::Salvaged {
            tracing::debug!(key, "a cut-off answer: its whole elements are kept");
        }
        value
    })
}

fn text_field(
    command: &serde_json::Value,
    name: &str,
    max: usize,
    at: usize,
    errors: &mut Vec<String>,
) -> String {
    match command.get(name) {
        Some(serde_json::Value::String(s)) if !s.trim().is_empty() => {
            if s.chars().count() > max {
                errors.push(format!(
                    "commands[{at}].{name} is longer than {max} characters"
                ));
            }
            s.trim().to_string()
        }
        _ => {
            errors.push(format!("commands[{at}].{name} must be a non-empty string"));
            String::new()
        }
    }
}

/// Reads an extraction answer for a batch of `batch_len` messages, for a category with
/// these tags (empty: any). `Err` says what is wrong, for the model to correct.
pub fn parse_commands(
    answer: &str,
    tags: &[(String, String)],
    batch_len: usize,
) -> Result<Vec<Command>, String> {
    let raw: RawCommands = json_part(answer, "commands")
        .and_then(|value| serde_json::from_value(value).map_err(|err| err.to_string()))
        .map_err(|err| {
            format!("the answer is not the JSON object {{\"commands\":[...]}} ({err})")
        })?;
    if raw.commands.len() > MAX_COMMANDS {
        return Err(format!("at most {MAX_COMMANDS} commands per answer"));
    }
    let mut errors = Vec::new();
    let mut commands = Vec::new();
    for (at, command) in raw.commands.iter().enumerate() {
        let kind = match command.get("command").and_then(|c| c.as_str()) {
            Some("add") => CommandKind::Add,
            Some("update") => CommandKind::Update,
            Some("delete") => CommandKind::Delete,
            other => {
                errors.push(format!(
                    "commands[{at}].command must be \"add\", \"update\" or \"delete\", got {other:?}"
                ));
                continue;
            }
        };
        let tag = text_field(command, "tag", MAX_NAME_CHARS, at, &mut errors);
        if !tag.is_empty()
            && !tags.is_empty()
            && !tags.iter().any(|(t, _)| t.eq_ignore_ascii_case(&tag))
        {
            let names: Vec<&str> = tags.iter().map(|(t, _)| t.as_str()).collect();
            errors.push(format!(
                "commands[{at}].tag {tag:?} is not one of {}",
                names.join(", ")
            ));
        }
        let feature = text_field(command, "feature", MAX_NAME_CHARS, at, &mut errors);
        let value = if kind == CommandKind::Delete {
            String::new()
        } else {
            text_field(command, "value", MAX_VALUE_CHARS, at, &mut errors)
        };
        // Numbers outside the batch (small models count on past its end) are left out
        // rather than losing the fact; none left cites the whole batch, as no list does.
        let mut messages = Vec::new();
        match command.get("messages") {
            None | Some(serde_json::Value::Null) => {}
            Some(serde_json::Value::Array(numbers)) => {
                for n in numbers {
                    let number = n
                        .as_u64()
                        .or_else(|| n.as_str().and_then(|s| s.trim().parse().ok()));
                    if let Some(n) = number.filter(|n| *n >= 1 && (*n as usize) <= batch_len) {
                        messages.push(n as usize - 1);
                    }
                }
            }
            Some(_) => errors.push(format!(
                "commands[{at}].messages must be a list of message numbers"
            )),
        }
        messages.sort_unstable();
        messages.dedup();
        // The category's own spelling of the tag.
        let tag = tags
            .iter()
            .find(|(t, _)| t.eq_ignore_ascii_case(&tag))
            .map_or(tag, |(t, _)| t.clone());
        commands.push(Command {
            kind,
            tag,
            feature,
            value,
            messages,
        });
    }
    if errors.is_empty() {
        Ok(commands)
    } else {
        Err(errors.join("; "))
    }
}

/// Asks again after an invalid answer, showing what was wrong.
pub fn correction(answer: &str, error: &str) -> [ChatMessage; 2] {
    [
        ChatMessage {
            role: Role::Assistant,
            content: answer.to_string(),
        },
        user(format!(
            "That answer is invalid: {error}. Answer again with the JSON object only."
        )),
    ]
}

/// The consolidation request for the features of one tag.
pub fn consolidation(category: &str, tag: &str, features: &[Feature]) -> Vec<ChatMessage> {
    let list: Vec<serde_json::Value> = features
        .iter()
        .map(|f| json!({"id": f.id, "feature": f.feature, "value": f.value}))
        .collect();
    vec![
        system(
            "You tidy a memory of facts. Merge features that say the same thing or that \
             are better as one, and drop ones that are superseded. Answer with JSON only: \
             {\"consolidated_memories\":[{\"tag\":\"...\",\"feature\":\"...\",\"value\":\"...\"}],\
             \"keep_memories\":[\"id\", ...]}: keep_memories lists the ids to keep as they \
             are; every other listed feature is replaced by consolidated_memories."
                .into(),
        ),
        user(format!(
            "Category: {category}\nTag: {tag}\nFeatures:\n{}",
            serde_json::Value::Array(list)
        )),
    ]
}

pub fn consolidation_schema() -> (String, serde_json::Value) {
    (
        "semantic_consolidation".into(),
        json!({
            "type": "object",
            "properties": {
                "consolidated_memories": {"type": "array", "items": {
                    "type": "object",
                    "properties": {
                        "tag": {"type": "string"},
                        "feature": {"type": "string"},
                        "value": {"type": "string"}
                    },
                    "required": ["tag", "feature", "value"]
                }},
                "keep_memories": {"type": "array", "items": {"type": "string"}}
            },
            "required": ["consolidated_memories", "keep_memories"]
        }),
    )
}

/// A validated consolidation: the features to add and the ids (of those sent) to keep.
#[derive(Debug, Clone, PartialEq)]
pub struct Consolidation {
    pub add: Vec<(String, String, String)>,
    pub keep: Vec<String>,
}

#[derive(Deserialize)]
struct RawConsolidation {
    consolidated_memories: Vec<RawMemory>,
    keep_memories: Vec<serde_json::Value>,
}

#[derive(Deserialize)]
struct RawMemory {
    tag: String,
    feature: String,
    value: String,
}

pub fn parse_consolidation(answer: &str, sent: &[Feature]) -> Result<Consolidation, String> {
    let raw: RawConsolidation = json_part(answer, "consolidated_memories")
        .and_then(|value| serde_json::from_value(value).map_err(|err| err.to_string()))
        .map_err(|err| format!("the answer is not the consolidation JSON object ({err})"))?;
    let sent_ids: std::collections::HashSet<&str> = sent.iter().map(|f| f.id.as_str()).collect();
    let mut keep = Vec::new();
    for id in raw.keep_memories {
        let id = match id {
            serde_json::Value::String(s) => s,
            other => other.to_string(),
        };
        if !sent_ids.contains(id.as_str()) {
            return Err(format!(
                "keep_memories names {id:?}, which is not one of the features"
            ));
        }
        keep.push(id);
    }
    let mut add = Vec::new();
    for m in raw.consolidated_memories {
        if m.feature.trim().is_empty() || m.value.trim().is_empty() {
            return Err("consolidated memories need a feature and a value".into());
        }
        if m.feature.chars().count() > MAX_NAME_CHARS || m.value.chars().count() > MAX_VALUE_CHARS {
            return Err("a consolidated memory is too long".into());
        }
        add.push((
            m.tag.trim().to_string(),
            m.feature.trim().to_string(),
            m.value.trim().to_string(),
        ));
    }
    Ok(Consolidation { add, keep })
}

/// The summary request: the previous summary (if any) and the episodes leaving the
/// short-term window.
pub fn summary(previous: Option<&str>, episodes: &[Episode]) -> Vec<ChatMessage> {
    let refs: Vec<&Episode> = episodes.iter().collect();
    vec![
        system(
            "You keep a running summary of a conversation. Fold the new messages into the \
             summary: keep names, facts, decisions and open questions; be concise. Answer \
             with the new summary as plain text."
                .into(),
        ),
        user(format!(
            "## Summary so far\n{}\n\n## New messages\n{}",
            previous.unwrap_or("(none)"),
            numbered(&refs)
        )),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_validated() {
        let tags = vec![("preferences".to_string(), String::new())];
        let ok = parse_commands(
            "```json\n{\"commands\":[{\"command\":\"add\",\"tag\":\"Preferences\",\"feature\":\"food\",\"value\":\"pizza\",\"messages\":[2]}]}\n```",
            &tags,
            2,
        )
        .unwrap();
        assert_eq!(ok[0].tag, "preferences");
        assert_eq!(ok[0].messages, [1]);
        let err = parse_commands(
            "{\"commands\":[{\"command\":\"add\",\"tag\":\"x\",\"feature\":\"\",\"messages\":[3]}]}",
            &tags,
            2,
        )
        .unwrap_err();
        assert!(err.contains("tag \"x\""), "{err}");
        assert!(err.contains("feature must be"), "{err}");
        assert!(err.contains("value must be"), "{err}");
        assert!(parse_commands("I think the user likes pizza", &tags, 1).is_err());
        // Numbers outside the batch are left out; none left cites the whole batch.
        let cited = |numbers: &str| {
            let answer = format!(
                "{{\"commands\":[{{\"command\":\"add\",\"tag\":\"preferences\",\"feature\":\"f\",\"value\":\"v\",\"messages\":{numbers}}}]}}"
            );
            parse_commands(&answer, &tags, 3).unwrap()[0]
                .messages
                .clone()
        };
        assert_eq!(cited("[2, 5, 0, \"3\"]"), [1, 2]);
        assert_eq!(cited("[7]"), Vec::<usize>::new());
    }
}
