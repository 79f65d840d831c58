//! Evaluates a filter against one episode's fields in memory, with exactly the
//! semantics of the SQL the stores compile it to (checked by `tests/filter_props.rs`):
//! a comparison with a field the episode lacks is false, `NOT` flips, number literals
//! compare numerically with values that hold numbers, strings compare bytewise.

use std::cmp::Ordering;

use super::filter::{CmpOp, Expr, Field, Literal};

/// One field's value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value<'a> {
    Text(&'a str),
    /// Microseconds since the Unix epoch (`created_at`).
    Time(i64),
}

/// What a filter can ask of an episode.
pub trait Fields {
    /// The field's value, `None` when the episode has none (an absent metadata key, an
    /// empty role or recipient).
    fn get(&self, field: &Field) -> Option<Value<'_>>;
}

/// The number a value holds, if it holds one (surrounding spaces allowed, finite only).
/// The SQL stores use the same rule (`mm_num`).
pub fn as_number(text: &str) -> Option<f64> {
    text.trim().parse::<f64>().ok().filter(|n| n.is_finite())
}

fn holds(ordering: Option<Ordering>, op: CmpOp) -> bool {
    let Some(ordering) = ordering else {
        return false;
    };
    match op {
        CmpOp::Eq => ordering == Ordering::Equal,
        CmpOp::Ne => ordering != Ordering::Equal,
        CmpOp::Gt => ordering == Ordering::Greater,
        CmpOp::Lt => ordering == Ordering::Less,
        CmpOp::Ge => ordering != Ordering::Less,
        CmpOp::Le => ordering != Ordering::Greater,
    }
}

fn compare(value: Value<'_>, literal: &Literal) -> Option<Ordering> {
    match (value, literal) {
        (Value::Text(text), Literal::Str(s)) => Some(text.as_bytes().cmp(s.as_bytes())),
        (Value::Text(text), Literal::Num(n)) => as_number(text)?.partial_cmp(n),
        (Value::Time(t), Literal::Time(u)) => Some(t.cmp(u)),
        // The parser gives `created_at`, the only time field, time literals only.
        (Value::Time(_), _) | (Value::Text(_), Literal::Time(_)) => None,
    }
}

/// `compare(..) == Some(Equal)`, cheaper for text (lengths first: filters are mostly
/// equality tests, run on many documents).
fn equal(value: Value<'_>, literal: &Literal) -> bool {
    match (value, literal) {
        (Value::Text(text), Literal::Str(s)) => text == s,
        _ => compare(value, literal) == Some(Ordering::Equal),
    }
}

/// Whether the episode with these fields passes the filter.
pub fn matches(expr: &Expr, fields: &impl Fields) -> bool {
    match expr {
        Expr::And(a, b) => matches(a, fields) && matches(b, fields),
        Expr::Or(a, b) => matches(a, fields) || matches(b, fields),
        Expr::Not(inner) => !matches(inner, fields),
        Expr::Cmp { field, op, value } => fields.get(field).is_some_and(|v| match op {
            CmpOp::Eq => equal(v, value),
            CmpOp::Ne => compare(v, value).is_some_and(Ordering::is_ne),
            _ => holds(compare(v, value), *op),
        }),
        Expr::In {
            field,
            values,
            negated,
        } => match fields.get(field) {
            None => false,
            Some(v) => {
                let found = values.iter().any(|literal| equal(v, literal));
                found != *negated
            }
        },
        Expr::IsNull { field, negated } => fields.get(field).is_none() != *negated,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::model::filter::{SystemField, parse};

    struct Doc {
        producer: &'static str,
        role: Option<&'static str>,
        created_at: i64,
        metadata: BTreeMap<&'static str, &'static str>,
    }

    impl Fields for Doc {
        fn get(&self, field: &Field) -> Option<Value<'_>> {
            match field {
                Field::Metadata(key) => self.metadata.get(key.as_str()).map(|v| Value::Text(v)),
                Field::System(SystemField::ProducerId) => Some(Value::Text(self.producer)),
                Field::System(SystemField::ProducerRole) => self.role.map(Value::Text),
                Field::System(SystemField::CreatedAt) => Some(Value::Time(self.created_at)),
                Field::System(SystemField::EpisodeType) => Some(Value::Text("message")),
                Field::System(_) => None,
            }
        }
    }

    fn check(filter: &str, doc: &Doc) -> bool {
        matches(&parse(filter).unwrap().unwrap(), doc)
    }

    #[test]
    fn follows_the_missing_field_and_number_rules() {
        let doc = Doc {
            producer: "alice",
            role: None,
            created_at: 2_000_000,
            metadata: [("turn", " 10 "), ("topic", "food")].into(),
        };
        assert!(check("producer_id = 'alice'", &doc));
        assert!(check("m.turn > 9", &doc), "numbers compare numerically");
        assert!(!check("m.turn > '9'", &doc), "strings compare bytewise");
        assert!(!check("m.missing != 'x'", &doc));
        assert!(check("NOT m.missing = 'x'", &doc));
        assert!(!check("m.missing NOT IN ('x')", &doc));
        assert!(check("m.topic NOT IN ('x', 1)", &doc));
        assert!(check("producer_role IS NULL AND m.topic IS NOT NULL", &doc));
        assert!(check(
            "created_at >= 2 AND created_at < '1970-01-01T00:00:03Z'",
            &doc
        ));
        assert!(
            !check("m.topic > 1", &doc),
            "a non-number never compares with a number"
        );
    }
}
