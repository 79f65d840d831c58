//! Compiles a filter expression to a PostgreSQL condition over the episode alias `e`,
//! with exactly the semantics of `model::filter_eval` (and of the SQLite dialect):
//!
//! - every predicate yields true or false, never NULL: a comparison with a field an
//!   episode lacks is false (so `m.x != 'a'` does not match episodes without `x`), and
//!   `NOT` flips it;
//! - number literals compare numerically with values that hold numbers (`mm_num`,
//!   migration 3), and never match values that do not;
//! - strings compare bytewise (`COLLATE "C"`, whatever the database's collation);
//! - `created_at`, the only time field, compares with time literals only.
//!
//! Metadata is a JSONB object of strings: `e.metadata ->> key` is the value or NULL.

use sqlx::{Postgres, QueryBuilder};

use memmachine_core::model::filter::{CmpOp, Expr, Field, Literal, SystemField};

/// Appends the condition for `expr` to `sql`, binding its parameters.
pub(super) fn compile(expr: &Expr, sql: &mut QueryBuilder<Postgres>) {
    match expr {
        Expr::And(a, b) | Expr::Or(a, b) => {
            let joiner = if matches!(expr, Expr::And(..)) {
                " AND "
            } else {
                " OR "
            };
            sql.push("(");
            compile(a, sql);
            sql.push(joiner);
            compile(b, sql);
            sql.push(")");
        }
        Expr::Not(inner) => {
            sql.push("(NOT ");
            compile(inner, sql);
            sql.push(")");
        }
        Expr::Cmp { field, op, value } => {
            sql.push("COALESCE(");
            comparison(field, *op, value, sql);
            sql.push(", FALSE)");
        }
        Expr::In {
            field,
            values,
            negated,
        } => {
            sql.push("(");
            if *negated {
                column(field, sql);
                sql.push(" IS NOT NULL AND NOT ");
            }
            sql.push("COALESCE(");
            in_lists(field, values, sql);
            sql.push(", FALSE))");
        }
        Expr::IsNull { field, negated } => {
            sql.push("(");
            column(field, sql);
            sql.push(if *negated {
                " IS NOT NULL)"
            } else {
                " IS NULL)"
            });
        }
    }
}

fn is_time(field: &Field) -> bool {
    matches!(field, Field::System(SystemField::CreatedAt))
}

/// `col = ANY(strings) OR mm_num(col) = ANY(numbers)` (times for `created_at`): one
/// array parameter per kind, however many values.
fn in_lists(field: &Field, values: &[Literal], sql: &mut QueryBuilder<Postgres>) {
    let mut texts = Vec::new();
    let mut numbers = Vec::new();
    let mut times = Vec::new();
    for value in values {
        match value {
            Literal::Str(s) => texts.push(s.clone()),
            Literal::Num(n) => numbers.push(*n),
            Literal::Time(t) => times.push(*t),
        }
    }
    if is_time(field) {
        // Only time literals can equal a time.
        sql.push("e.created_at = ANY(");
        sql.push_bind(times);
        sql.push(")");
        return;
    }
    sql.push("(");
    column(field, sql);
    sql.push(" COLLATE \"C\" = ANY(");
    sql.push_bind(texts);
    sql.push(") OR mm_num(");
    column(field, sql);
    sql.push(") = ANY(");
    sql.push_bind(numbers);
    sql.push("))");
}

fn comparison(field: &Field, op: CmpOp, value: &Literal, sql: &mut QueryBuilder<Postgres>) {
    match (is_time(field), value) {
        (false, Literal::Num(n)) => {
            sql.push("mm_num(");
            column(field, sql);
            sql.push(") ");
            sql.push(op.sql());
            sql.push(" ");
            sql.push_bind(*n);
        }
        (false, Literal::Str(s)) => {
            column(field, sql);
            sql.push(" COLLATE \"C\" ");
            sql.push(op.sql());
            sql.push(" ");
            sql.push_bind(s.clone());
        }
        (true, Literal::Time(micros)) => {
            sql.push("e.created_at ");
            sql.push(op.sql());
            sql.push(" ");
            sql.push_bind(*micros);
        }
        // A time with a text field, or a text or number with the time field: never
        // equal, never ordered (`filter_eval::compare` gives None).
        _ => {
            sql.push("FALSE");
        }
    }
}

fn column(field: &Field, sql: &mut QueryBuilder<Postgres>) {
    match field {
        Field::System(system) => {
            sql.push(memmachine_core::store::episode_column(*system).unwrap_or("NULL::text"));
        }
        Field::Metadata(key) => {
            sql.push("(e.metadata ->> ");
            sql.push_bind(key.clone());
            sql.push(")");
        }
    }
}
