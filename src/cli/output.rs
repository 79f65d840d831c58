//! How answers are printed: aligned tables for people, JSON (the proto's field names)
//! for scripts.

use std::io::Write;

use serde_json::{Value, json};

use super::CliError;
use crate::grpc::convert::json_object;
use memmachine_proto::v2 as pb;

/// Writes `text` and a newline to stdout. A closed pipe (`| head`) ends the command
/// quietly, as other Unix tools do.
pub fn out(text: impl std::fmt::Display) -> Result<(), CliError> {
    let mut stdout = std::io::stdout().lock();
    match writeln!(stdout, "{text}").and_then(|()| stdout.flush()) {
        Ok(()) => Ok(()),
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        Err(err) => Err(CliError::Failed(format!("cannot write the output: {err}"))),
    }
}

pub fn print_json(value: &Value) -> Result<(), CliError> {
    out(serde_json::to_string_pretty(value).unwrap_or_default())
}

/// The width tables fit in: `$COLUMNS`, else 120.
fn width() -> usize {
    std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.parse().ok())
        .filter(|&c: &usize| c >= 40)
        .unwrap_or(120)
}

/// Rows under a header, columns apart by two spaces and measured by display width (a
/// CJK character takes two columns); the last column (the text) is cut to fit the width.
pub struct Table {
    headers: Vec<&'static str>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(headers: &[&'static str]) -> Table {
        Table {
            headers: headers.to_vec(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows
            .push(cells.into_iter().map(|c| flat(&c)).collect());
    }

    pub fn print(&self) -> Result<(), CliError> {
        if self.rows.is_empty() {
            return out("(none)");
        }
        out(self.render(width()))
    }

    /// The table laid out in `width` columns of the terminal.
    fn render(&self, width: usize) -> String {
        use comfy_table::{ColumnConstraint, ContentArrangement, Row, Width};

        let mut table = comfy_table::Table::new();
        table
            .load_style(comfy_table::presets::NOTHING)
            .set_content_arrangement(ContentArrangement::Dynamic)
            .set_width(u16::try_from(width).unwrap_or(u16::MAX))
            .set_truncation_indicator("…")
            .set_header(self.headers.clone());
        for cells in &self.rows {
            let mut row = Row::from(cells.clone());
            row.max_height(1);
            table.add_row(row);
        }
        let columns = self.headers.len();
        for (i, column) in table.column_iter_mut().enumerate() {
            if i + 1 < columns {
                // Only the last column gives way.
                column.set_padding((0, 2));
                column.set_constraint(ColumnConstraint::ContentWidth);
            } else {
                column.set_padding((0, 0));
                column.set_constraint(ColumnConstraint::LowerBoundary(Width::Fixed(20)));
            }
        }
        table.trim_fmt()
    }
}

/// One line: newlines and tabs as spaces.
fn flat(text: &str) -> String {
    text.replace(['\n', '\r', '\t'], " ")
}

/// A timestamp as RFC 3339 (UTC, seconds), or "-" when unset.
pub fn time(ts: &Option<prost_types::Timestamp>) -> String {
    ts.as_ref()
        .and_then(|t| chrono::DateTime::from_timestamp(t.seconds, t.nanos.max(0) as u32))
        .map_or_else(
            || "-".to_string(),
            |t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
        )
}

/// A timestamp in JSON: RFC 3339 with the fraction, or null.
fn json_time(ts: &Option<prost_types::Timestamp>) -> Value {
    ts.as_ref()
        .and_then(|t| chrono::DateTime::from_timestamp(t.seconds, t.nanos.max(0) as u32))
        .map_or(Value::Null, |t| {
            Value::String(t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true))
        })
}

/// `12,345`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut text = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            text.push(',');
        }
        text.push(c);
    }
    text
}

pub fn episode_json(e: &pb::Episode) -> Value {
    json!({
        "uid": e.uid,
        "content": e.content,
        "session_key": e.session_key,
        "created_at": json_time(&e.created_at),
        "producer_id": e.producer_id,
        "producer_role": e.producer_role,
        "produced_for_id": e.produced_for_id,
        "sequence_num": e.sequence_num,
        "episode_type": pb::EpisodeType::try_from(e.episode_type)
            .map_or("EPISODE_TYPE_UNSPECIFIED", |t| t.as_str_name()),
        "content_type": pb::ContentType::try_from(e.content_type)
            .map_or("CONTENT_TYPE_UNSPECIFIED", |t| t.as_str_name()),
        "metadata": e.metadata,
    })
}

pub fn feature_json(f: &pb::SemanticFeature) -> Value {
    json!({
        "id": f.id,
        "set_id": f.set_id,
        "category": f.category,
        "category_id": f.category_id,
        "tag": f.tag,
        "feature_name": f.feature_name,
        "value": f.value,
        "citations": f.citations,
        "metadata": json_object(f.metadata.clone()),
        "score": f.score,
        "created_at": json_time(&f.created_at),
        "updated_at": json_time(&f.updated_at),
    })
}

pub fn project_json(p: &pb::Project) -> Value {
    let config = p.config.clone().unwrap_or_default();
    json!({
        "org_id": p.org_id,
        "project_id": p.project_id,
        "description": p.description,
        "config": {"embedder": config.embedder, "reranker": config.reranker},
        "created_at": json_time(&p.created_at),
    })
}

/// Episodes as a table: sequence number, uid, producer, when, content.
pub fn episode_table(episodes: &[pb::Episode]) -> Table {
    let mut table = Table::new(&["SEQ", "UID", "PRODUCER", "CREATED", "CONTENT"]);
    for e in episodes {
        table.row(vec![
            e.sequence_num.to_string(),
            e.uid.clone(),
            e.producer_id.clone(),
            time(&e.created_at),
            e.content.clone(),
        ]);
    }
    table
}

/// Features as a table; with the score column for search results.
pub fn feature_table(features: &[pb::SemanticFeature], scored: bool) -> Table {
    let headers: &[&str] = if scored {
        &["SCORE", "ID", "CATEGORY", "TAG", "FEATURE", "VALUE"]
    } else {
        &["ID", "CATEGORY", "TAG", "FEATURE", "VALUE"]
    };
    let mut table = Table::new(headers);
    for f in features {
        let mut row = Vec::new();
        if scored {
            row.push(format!("{:.4}", f.score));
        }
        row.extend([
            f.id.clone(),
            f.category.clone(),
            f.tag.clone(),
            f.feature_name.clone(),
            f.value.clone(),
        ]);
        table.row(row);
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_text_are_shaped_for_people() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(12_000), "12,000");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(flat("a\nb\tc"), "a b c");
    }

    /// Display columns of `text` (a CJK character takes two).
    fn columns(text: &str) -> usize {
        text.chars().map(|c| if c.is_ascii() { 1 } else { 2 }).sum()
    }

    #[test]
    fn tables_align_wide_characters_by_display_width() {
        let mut table = Table::new(&["NAME", "ID", "TEXT"]);
        table.row(vec!["猫の名前".into(), "a1".into(), "short".into()]);
        table.row(vec!["dog".into(), "b2".into(), "also short".into()]);
        let printed = table.render(80);
        let lines: Vec<&str> = printed.lines().collect();
        assert_eq!(lines.len(), 3, "{printed}");
        assert!(lines[0].starts_with("NAME"), "{printed}");
        // The ID column starts at the same display column on every line: after the
        // widest NAME (8 columns for four CJK characters) and two spaces.
        for line in &lines {
            let id_at = line.find(['I', 'a', 'b']).unwrap();
            assert_eq!(columns(&line[..id_at]), 10, "{line:?} in\n{printed}");
        }
    }

    #[test]
    fn the_last_column_is_cut_to_the_width_by_display_width() {
        let mut table = Table::new(&["ID", "TEXT"]);
        table.row(vec!["x".into(), "字".repeat(60)]);
        let printed = table.render(40);
        let row = printed.lines().nth(1).unwrap();
        assert!(columns(row) <= 40, "{} columns: {row}", columns(row));
        assert!(row.starts_with("x   字"), "{row}");
        assert!(row.ends_with('…'), "{row}");
    }
}
