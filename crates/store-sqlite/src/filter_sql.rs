//! Compiles a filter expression to a SQL condition over the episode alias `e`.
//!
//! Every predicate yields 0 or 1, never NULL: a comparison with a field an episode lacks
//! is false (so `m.x != 'a'` does not match episodes without `x`), and `NOT` flips it.
//! Number literals compare numerically with values that hold numbers (`mm_num`).

use rusqlite::types::Value;

use memmachine_core::model::filter::{CmpOp, Expr, Field, Literal};

/// Appends the condition for `expr` to `sql`, pushing its parameters onto `params`.
pub(super) fn compile(expr: &Expr, sql: &mut String, params: &mut Vec<Value>) {
    match expr {
        Expr::And(a, b) | Expr::Or(a, b) => {
            let joiner = if matches!(expr, Expr::And(..)) {
                " AND "
            } else {
                " OR "
            };
            sql.push('(');
            compile(a, sql, params);
            sql.push_str(joiner);
            compile(b, sql, params);
            sql.push(')');
        }
        Expr::Not(inner) => {
            sql.push_str("(NOT ");
            compile(inner, sql, params);
            sql.push(')');
        }
        Expr::Cmp { field, op, value } => {
            sql.push_str("COALESCE(");
            comparison(field, *op, value, sql, params);
            sql.push_str(", 0)");
        }
        Expr::In {
            field,
            values,
            negated,
        } => {
            sql.push('(');
            if *negated {
                column(field, sql, params);
                sql.push_str(" IS NOT NULL AND NOT ");
            }
            sql.push_str("COALESCE(");
            in_lists(field, values, sql, params);
            sql.push_str(", 0))");
        }
        Expr::IsNull { field, negated } => {
            sql.push('(');
            match field {
                // A key that is absent, or whose metadata is empty (stored as NULL).
                Field::Metadata(key) => {
                    sql.push_str("json_type(e.metadata, ?)");
                    params.push(Value::Text(json_path(key)));
                }
                Field::System(_) => column(field, sql, params),
            }
            sql.push_str(if *negated {
                " IS NOT NULL)"
            } else {
                " IS NULL)"
            });
        }
    }
}

/// `col IN (strings) OR mm_num(col) IN (numbers)`: flat lists, however many values.
fn in_lists(field: &Field, values: &[Literal], sql: &mut String, params: &mut Vec<Value>) {
    let (numbers, others): (Vec<&Literal>, Vec<&Literal>) =
        values.iter().partition(|v| matches!(v, Literal::Num(_)));
    let mut first = true;
    for (group, numeric) in [(others, false), (numbers, true)] {
        if group.is_empty() {
            continue;
        }
        if !first {
            sql.push_str(" OR ");
        }
        first = false;
        if numeric {
            sql.push_str("mm_num(");
            column(field, sql, params);
            sql.push(')');
        } else {
            column(field, sql, params);
        }
        sql.push_str(" IN (");
        for (i, value) in group.into_iter().enumerate() {
            sql.push_str(if i == 0 { "?" } else { ", ?" });
            params.push(match value {
                Literal::Num(n) => Value::Real(*n),
                Literal::Str(s) => Value::Text(s.clone()),
                Literal::Time(t) => Value::Integer(*t),
            });
        }
        sql.push(')');
    }
}

fn comparison(
    field: &Field,
    op: CmpOp,
    value: &Literal,
    sql: &mut String,
    params: &mut Vec<Value>,
) {
    match value {
        Literal::Num(n) => {
            sql.push_str("mm_num(");
            column(field, sql, params);
            sql.push(')');
            params.push(Value::Real(*n));
        }
        Literal::Str(s) => {
            column(field, sql, params);
            params.push(Value::Text(s.clone()));
        }
        Literal::Time(micros) => {
            column(field, sql, params);
            params.push(Value::Integer(*micros));
        }
    }
    sql.push(' ');
    sql.push_str(op.sql());
    sql.push_str(" ?");
}

fn column(field: &Field, sql: &mut String, params: &mut Vec<Value>) {
    match field {
        Field::System(system) => {
            sql.push_str(memmachine_core::store::episode_column(*system).unwrap_or("NULL"));
        }
        Field::Metadata(key) => {
            sql.push_str("json_extract(e.metadata, ?)");
            params.push(Value::Text(json_path(key)));
        }
    }
}

/// A JSON path naming one top-level key (quoted, so dots and colons stay in the key).
fn json_path(key: &str) -> String {
    format!("$.\"{}\"", key.replace('\\', "\\\\").replace('"', "\\\""))
}
