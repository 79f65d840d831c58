//! `memmachine add`: messages from the arguments, or from standard input in batches
//! (plain lines or JSON Lines) with a progress line.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use serde::Deserialize;
use serde_json::json;
use tokio::io::AsyncBufReadExt;

use super::connect::Client;
use super::output::{out, print_json, thousands};
use super::{CliError, ClientArgs, MemoryTypeArg, key_value};
use memmachine_proto::v2 as pb;

pub const ADD_HELP: &str = concat!(
    "\
Standard input (no TEXT, or `-`): one message per line, or JSON Lines objects
  {\"content\": \"...\", \"producer\": \"alice\", \"produced_for\": \"bot\", \"role\": \"user\",
   \"timestamp\": \"2024-05-08T13:56:00Z\", \"expires_at\": \"2025-05-08T00:00:00Z\",
   \"metadata\": {\"topic\": \"pets\"}}
(only content is required; the flags give the other fields' defaults). With --format
auto (the default) a line that is a JSON object is such a message, and any other line is
plain text; blank lines are skipped. They are streamed through one ImportMemories call
--batch at a time, the server reading as fast as it stores; each batch is stored
completely or not at all, and the first refused one ends the import (the batches before
it stay stored). Progress and the counts go to stderr (with --json, the counts to stdout).

",
    super::exit_codes_text!()
);

/// A batch is also closed at this many bytes of content, well below the server's
/// default request limit (64 MiB), whatever --batch says.
const MAX_BATCH_BYTES: usize = 8 * 1024 * 1024;

/// Without a terminal, a progress line every this many batches.
const PROGRESS_EVERY_BATCHES: u64 = 10;

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum InputFormat {
    /// JSON objects are messages, other lines plain text
    Auto,
    /// Every line is one message's text
    Lines,
    /// Every line is a JSON object
    Jsonl,
}

#[derive(Args, Debug)]
pub struct AddArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    /// Messages, one per argument; none (or `-`) reads them from standard input
    pub text: Vec<String>,
    /// Who said them [default: user]
    #[arg(long)]
    pub producer: Option<String>,
    /// Whom they were said to
    #[arg(long)]
    pub produced_for: Option<String>,
    /// user, assistant, system or free text
    #[arg(long)]
    pub role: Option<String>,
    /// When they were said, RFC 3339 [default: now]
    #[arg(long)]
    pub timestamp: Option<String>,
    /// When they expire, RFC 3339 (never returned after it, then deleted)
    #[arg(long, conflicts_with = "expires_in")]
    pub expires_at: Option<String>,
    /// How long they are kept from now: a number with s, m, h or d (e.g. 30d)
    #[arg(long, value_parser = parse_duration)]
    pub expires_in: Option<Duration>,
    /// Metadata on every message, KEY=VALUE (repeatable)
    #[arg(long = "meta", value_name = "KEY=VALUE", value_parser = key_value)]
    pub meta: Vec<(String, String)>,
    /// Memory types to add to [default: every enabled type]
    #[arg(long, value_delimiter = ',')]
    pub types: Vec<MemoryTypeArg>,
    /// How standard input is read
    #[arg(long, value_enum, default_value = "auto")]
    pub format: InputFormat,
    /// Messages per request (the server takes at most 1,000 by default)
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub batch: u32,
}

/// A JSON Lines message; unknown fields are refused so a typo is not silently lost.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonMessage {
    content: String,
    producer: Option<String>,
    produced_for: Option<String>,
    role: Option<String>,
    timestamp: Option<String>,
    expires_at: Option<String>,
    #[serde(default)]
    metadata: HashMap<String, serde_json::Value>,
}

pub async fn run(args: AddArgs) -> Result<(), CliError> {
    let defaults = defaults(&args)?;
    let from_stdin = args.text.is_empty() || args.text == ["-"];
    let client = Client::connect(&args.client).await?;
    let types = MemoryTypeArg::wire(&args.types);
    if !from_stdin {
        let messages = args
            .text
            .iter()
            .map(|text| with_content(&defaults, text.clone()))
            .collect();
        let uids = send(&client, &types, messages).await?;
        return print_uids(&args.client, &uids);
    }
    let mut import = Import::start(&client, &types);
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    let mut batch = Vec::new();
    // The input line of each message of the batch, to name them when it is refused.
    let mut batch_lines = Vec::new();
    let mut batch_bytes = 0;
    let mut line_no = 0u64;
    let mut skipped = 0u64;
    let mut input_error = None;
    loop {
        let line = match lines.next_line().await {
            Ok(Some(line)) => line,
            Ok(None) => break,
            Err(err) => {
                let at = line_no + 1;
                input_error = Some(CliError::Input(format!("line {at}: cannot read: {err}")));
                break;
            }
        };
        line_no += 1;
        let message = match parse_line(&line, line_no, args.format, &defaults) {
            Ok(Some(message)) => message,
            Ok(None) => {
                skipped += 1;
                continue;
            }
            Err(err) => {
                input_error = Some(err);
                break;
            }
        };
        batch_bytes += message.content.len();
        batch.push(message);
        batch_lines.push(line_no);
        if batch.len() >= args.batch as usize || batch_bytes >= MAX_BATCH_BYTES {
            let lines = std::mem::take(&mut batch_lines);
            batch_bytes = 0;
            if !import.send(std::mem::take(&mut batch), lines).await {
                // The server stopped reading: its answer says why.
                break;
            }
        }
    }
    // A bad input line ends the import before its batch: what came before is stored.
    if input_error.is_none() && !batch.is_empty() {
        import.send(batch, batch_lines).await;
    }
    let answer = import.finish().await;
    if let Some(err) = input_error {
        return Err(err);
    }
    let (answer, mut progress, sent_lines) = answer?;
    if let Some(error) = &answer.first_error {
        progress.clear_line();
        let status = tonic::Status::new(tonic::Code::from(error.code), error.message.clone());
        let lines = sent_lines
            .iter()
            .find(|(batch, _)| *batch == error.batch as u64)
            .map_or(&[][..], |(_, lines)| lines.as_slice());
        let context = batch_context(&status, lines, answer.messages as u64);
        return Err(CliError::Batch { status, context });
    }
    progress.finish(&client.project_name(), &answer, skipped);
    if args.client.json {
        print_json(&json!({
            "batches": answer.batches,
            "messages": answer.messages,
            "duplicates": answer.duplicates,
        }))?;
    }
    Ok(())
}
/// The message fields the flags give, as every message's defaults.
fn defaults(args: &AddArgs) -> Result<pb::MemoryMessage, CliError> {
    let timestamp = args
        .timestamp
        .as_deref()
        .map(|t| parse_time(t).map_err(|err| CliError::Usage(format!("--timestamp: {err}"))))
        .transpose()?;
    let expires_at = match (&args.expires_at, args.expires_in) {
        (Some(t), _) => {
            Some(parse_time(t).map_err(|err| CliError::Usage(format!("--expires-at: {err}")))?)
        }
        (None, Some(d)) => {
            let at = chrono::Utc::now() + d;
            Some(prost_types::Timestamp {
                seconds: at.timestamp(),
                nanos: at.timestamp_subsec_nanos() as i32,
            })
        }
        (None, None) => None,
    };
    Ok(pb::MemoryMessage {
        expires_at,
        content: String::new(),
        producer: args.producer.clone().unwrap_or_default(),
        produced_for: args.produced_for.clone().unwrap_or_default(),
        timestamp,
        role: args.role.clone().unwrap_or_default(),
        metadata: args.meta.iter().cloned().collect(),
        episode_type: 0,
        idempotency_key: String::new(),
    })
}

fn with_content(defaults: &pb::MemoryMessage, content: String) -> pb::MemoryMessage {
    pb::MemoryMessage {
        content,
        ..defaults.clone()
    }
}

/// `30d`, `12h`, `90m`, `45s` or plain seconds.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, unit) = match text.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => (&text[..i], c),
        _ => (text, 's'),
    };
    let scale = match unit {
        's' => 1.0,
        'm' => 60.0,
        'h' => 3600.0,
        'd' => 86_400.0,
        _ => return Err(format!("{text:?}: the unit is one of s, m, h, d")),
    };
    number
        .parse::<f64>()
        .ok()
        .filter(|n| *n > 0.0)
        .and_then(|n| Duration::try_from_secs_f64(n * scale).ok())
        .ok_or_else(|| format!("{text:?} is not a positive duration (e.g. 30d, 12h)"))
}

fn parse_time(text: &str) -> Result<prost_types::Timestamp, String> {
    let t = chrono::DateTime::parse_from_rfc3339(text)
        .map_err(|err| format!("{text:?} is not an RFC 3339 time: {err}"))?;
    Ok(prost_types::Timestamp {
        seconds: t.timestamp(),
        nanos: t.timestamp_subsec_nanos() as i32,
    })
}

/// The message a line holds; None for a blank line.
fn parse_line(
    line: &str,
    line_no: u64,
    format: InputFormat,
    defaults: &pb::MemoryMessage,
) -> Result<Option<pb::MemoryMessage>, CliError> {
    let line = line.strip_suffix('\r').unwrap_or(line);
    if line.trim().is_empty() {
        return Ok(None);
    }
    let is_object = || {
        line.trim_start().starts_with('{')
            && serde_json::from_str::<serde_json::Value>(line).is_ok_and(|v| v.is_object())
    };
    let json = match format {
        InputFormat::Lines => false,
        InputFormat::Jsonl => true,
        InputFormat::Auto => is_object(),
    };
    if !json {
        return Ok(Some(with_content(defaults, line.to_string())));
    }
    let bad = |reason: String| CliError::Input(format!("line {line_no}: {reason}"));
    let parsed: JsonMessage =
        serde_json::from_str(line).map_err(|err| bad(format!("not a JSON message: {err}")))?;
    let mut message = with_content(defaults, parsed.content);
    if let Some(producer) = parsed.producer {
        message.producer = producer;
    }
    if let Some(produced_for) = parsed.produced_for {
        message.produced_for = produced_for;
    }
    if let Some(role) = parsed.role {
        message.role = role;
    }
    if let Some(timestamp) = parsed.timestamp {
        message.timestamp =
            Some(parse_time(&timestamp).map_err(|err| bad(format!("timestamp: {err}")))?);
    }
    if let Some(expires_at) = parsed.expires_at {
        message.expires_at =
            Some(parse_time(&expires_at).map_err(|err| bad(format!("expires_at: {err}")))?);
    }
    for (key, value) in parsed.metadata {
        // The wire's metadata values are strings; numbers and flags keep their JSON text.
        let value = match value {
            serde_json::Value::String(s) => s,
            other => other.to_string(),
        };
        message.metadata.insert(key, value);
    }
    Ok(Some(message))
}

/// Rate-limit refusals carry the wait the server names (RetryInfo); the limiter
/// refused the batch before it was applied, so sending it again stores it once. A long
/// import then slows to the limit instead of stopping.
const MAX_RATE_LIMIT_RETRIES: u32 = 30;

async fn send(
    client: &Client,
    types: &[i32],
    messages: Vec<pb::MemoryMessage>,
) -> Result<Vec<String>, CliError> {
    use tonic_types::StatusExt;
    let mut retries = 0;
    loop {
        let request = client.request(pb::AddMemoriesRequest {
            org_id: client.org.clone(),
            project_id: client.project.clone(),
            types: types.to_vec(),
            messages: messages.clone(),
        });
        let status = match client.memory().add_memories(request).await {
            Ok(answer) => {
                return Ok(answer
                    .into_inner()
                    .results
                    .into_iter()
                    .map(|r| r.uid)
                    .collect());
            }
            Err(status) => status,
        };
        let wait = status.get_details_retry_info().and_then(|r| r.retry_delay);
        match wait {
            Some(wait)
                if status.code() == tonic::Code::ResourceExhausted
                    && retries < MAX_RATE_LIMIT_RETRIES =>
            {
                retries += 1;
                let wait = wait.clamp(Duration::from_millis(10), Duration::from_secs(60));
                tokio::time::sleep(wait).await;
            }
            _ => return Err(status.into()),
        }
    }
}

fn print_uids(args: &ClientArgs, uids: &[String]) -> Result<(), CliError> {
    if args.json {
        return print_json(&json!({ "uids": uids }));
    }
    for uid in uids {
        out(uid)?;
    }
    Ok(())
}

/// Input lines of this many batches sent last are kept, to name a refused one's.
const KEPT_BATCH_LINES: usize = 1024;

type ImportAnswer = Result<tonic::Response<pb::ImportMemoriesResponse>, tonic::Status>;
/// Batch positions and the input lines each held.
type SentLines = std::collections::VecDeque<(u64, Vec<u64>)>;

/// One `ImportMemories` call streaming the batches of standard input; the server reads
/// them at the pace it stores them, so sending waits when it is behind.
struct Import {
    org: String,
    project: String,
    types: Vec<i32>,
    sender: Option<tokio::sync::mpsc::Sender<pb::ImportMemoriesRequest>>,
    call: tokio::task::JoinHandle<ImportAnswer>,
    batches: u64,
    lines: SentLines,
    progress: Progress,
}

impl Import {
    fn start(client: &Client, types: &[i32]) -> Import {
        let (sender, receiver) = tokio::sync::mpsc::channel(2);
        let requests = futures::stream::unfold(receiver, |mut receiver| async move {
            receiver.recv().await.map(|request| (request, receiver))
        });
        let request = client.request(requests);
        let mut memory = client.memory();
        Import {
            org: client.org.clone(),
            project: client.project.clone(),
            types: types.to_vec(),
            sender: Some(sender),
            call: tokio::spawn(async move { memory.import_memories(request).await }),
            batches: 0,
            lines: SentLines::new(),
            progress: Progress::new(),
        }
    }

    /// False once the server has stopped reading (it answered).
    async fn send(&mut self, messages: Vec<pb::MemoryMessage>, lines: Vec<u64>) -> bool {
        let Some(sender) = &self.sender else {
            return false;
        };
        let count = messages.len() as u64;
        // Every batch names its project and types: an empty `types` means every type.
        let request = pb::ImportMemoriesRequest {
            org_id: self.org.clone(),
            project_id: self.project.clone(),
            types: self.types.clone(),
            messages,
        };
        if sender.send(request).await.is_err() {
            self.sender = None;
            return false;
        }
        if self.lines.len() == KEPT_BATCH_LINES {
            self.lines.pop_front();
        }
        self.lines.push_back((self.batches, lines));
        self.batches += 1;
        self.progress.batch_sent(count);
        true
    }

    /// Ends the stream and waits for the answer.
    async fn finish(
        mut self,
    ) -> Result<(pb::ImportMemoriesResponse, Progress, SentLines), CliError> {
        self.sender = None;
        let answer = self
            .call
            .await
            .map_err(|err| CliError::Failed(format!("the import task failed: {err}")))?;
        match answer {
            Ok(answer) => Ok((answer.into_inner(), self.progress, self.lines)),
            Err(status) => {
                self.progress.clear_line();
                Err(status.into())
            }
        }
    }
}

/// "input lines 501-1000 not stored, 500 messages before them added; messages[3] is
/// line 504": where a refused batch stands in the input.
fn batch_context(status: &tonic::Status, lines: &[u64], added: u64) -> String {
    use tonic_types::StatusExt;
    let (first, last) = (
        lines.first().copied().unwrap_or(0),
        lines.last().copied().unwrap_or(0),
    );
    let mut context = format!(
        "input lines {first}-{last} not stored, {} messages before them added",
        thousands(added)
    );
    // A refused unary call lists its fields in details; an import's first_error only
    // in its message ("messages[3].content: ...").
    let mut fields: Vec<String> = status
        .get_details_bad_request()
        .map(|bad| bad.field_violations)
        .unwrap_or_default()
        .into_iter()
        .map(|v| v.field)
        .collect();
    if fields.is_empty() {
        fields = status
            .message()
            .match_indices("messages[")
            .map(|(at, _)| status.message()[at..].to_string())
            .collect();
    }
    let mut named: Vec<String> = fields
        .iter()
        .filter_map(|field| {
            let index = field.strip_prefix("messages[")?.split(']').next()?;
            let line = lines.get(index.parse::<usize>().ok()?)?;
            Some(format!("messages[{index}] is line {line}"))
        })
        .collect();
    named.dedup();
    named.truncate(3);
    if !named.is_empty() {
        context.push_str("; ");
        context.push_str(&named.join(", "));
    }
    context
}

/// The progress line on stderr: rewritten in place on a terminal, a line every few
/// batches otherwise.
struct Progress {
    start: Instant,
    terminal: bool,
    sent: u64,
    batches: u64,
    shown: bool,
}

impl Progress {
    fn new() -> Progress {
        Progress {
            start: Instant::now(),
            terminal: std::io::stderr().is_terminal(),
            sent: 0,
            batches: 0,
            shown: false,
        }
    }

    fn rate(&self, messages: u64) -> String {
        let secs = self
            .start
            .elapsed()
            .max(Duration::from_millis(1))
            .as_secs_f64();
        thousands((messages as f64 / secs).round() as u64)
    }

    /// A batch went out: with backpressure, the server is at most a few behind.
    fn batch_sent(&mut self, count: u64) {
        self.sent += count;
        self.batches += 1;
        if self.terminal {
            eprint!(
                "\rsent {} messages ({}/s)\x1b[K",
                thousands(self.sent),
                self.rate(self.sent)
            );
            self.shown = true;
        } else if self.batches.is_multiple_of(PROGRESS_EVERY_BATCHES) {
            eprintln!(
                "sent {} messages ({}/s)",
                thousands(self.sent),
                self.rate(self.sent)
            );
        }
    }

    fn clear_line(&mut self) {
        if self.shown {
            eprint!("\r\x1b[K");
            self.shown = false;
        }
    }

    fn finish(&mut self, project: &str, answer: &pb::ImportMemoriesResponse, skipped: u64) {
        self.clear_line();
        let blank = match skipped {
            0 => String::new(),
            1 => ", skipped 1 blank line".to_string(),
            n => format!(", skipped {} blank lines", thousands(n)),
        };
        let duplicates = match answer.duplicates {
            0 => String::new(),
            n => format!(
                ", {} already stored (idempotency keys)",
                thousands(n as u64)
            ),
        };
        eprintln!(
            "added {} messages to {project} in {} batches, {:.1}s ({}/s){duplicates}{blank}",
            thousands(answer.messages as u64),
            thousands(answer.batches as u64),
            self.start.elapsed().as_secs_f64(),
            self.rate(answer.messages as u64)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiry_durations_take_a_unit() {
        assert_eq!(parse_duration("30d"), Ok(Duration::from_secs(30 * 86_400)));
        assert_eq!(parse_duration("90m"), Ok(Duration::from_secs(90 * 60)));
        assert_eq!(parse_duration("45"), Ok(Duration::from_secs(45)));
        for bad in ["0", "-1h", "3w", "d", "soon"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    fn defaults() -> pb::MemoryMessage {
        pb::MemoryMessage {
            producer: "bob".into(),
            ..Default::default()
        }
    }

    #[test]
    fn lines_are_text_or_json_messages() {
        let d = defaults();
        let plain = parse_line("hello {x}\r", 1, InputFormat::Auto, &d)
            .unwrap()
            .unwrap();
        assert_eq!(
            (plain.content.as_str(), plain.producer.as_str()),
            ("hello {x}", "bob")
        );
        let line = r#"{"content":"hi","producer":"alice","metadata":{"n":3,"t":"x"},"timestamp":"2024-01-02T03:04:05Z"}"#;
        let json = parse_line(line, 2, InputFormat::Auto, &d).unwrap().unwrap();
        assert_eq!(json.content, "hi");
        assert_eq!(json.producer, "alice");
        assert_eq!(json.metadata["n"], "3");
        assert_eq!(json.timestamp.unwrap().seconds, 1_704_164_645);
        // As plain lines, the same text is the message itself.
        let text = parse_line(line, 2, InputFormat::Lines, &d)
            .unwrap()
            .unwrap();
        assert_eq!(text.content, line);
        assert!(
            parse_line("  ", 3, InputFormat::Auto, &d)
                .unwrap()
                .is_none()
        );
        let err = parse_line(r#"{"contents":"x"}"#, 7, InputFormat::Auto, &d).unwrap_err();
        assert!(
            err.line().starts_with("line 7: not a JSON message"),
            "{}",
            err.line()
        );
        assert!(parse_line("plain", 8, InputFormat::Jsonl, &d).is_err());
    }
}
