//! The filter language of the contract (MemMachine's syntax):
//!
//! ```text
//! expr       := and_expr ("OR" and_expr)*
//! and_expr   := unary ("AND" unary)*
//! unary      := "NOT" unary | "(" expr ")" | predicate
//! predicate  := field op literal | field ["NOT"] "IN" "(" literal ("," literal)* ")"
//!             | field "IS" ["NOT"] "NULL"
//! field      := system_field | ("m" | "metadata") "." key
//! op         := "=" | "!=" | "<>" | ">" | "<" | ">=" | "<="
//! ```
//! Keywords are case-insensitive; strings take single or double quotes (backslash
//! escapes the next character, and a doubled quote is one quote, as in SQL); `created_at` compares with RFC 3339 timestamps (or
//! Unix seconds). Errors carry the 1-based character position where parsing failed.

use crate::error::Error;

/// Longest filter accepted, in bytes.
pub const MAX_FILTER_BYTES: usize = 16 * 1024;
/// Deepest nesting of parentheses and NOTs accepted.
pub const MAX_DEPTH: usize = 64;
/// Most predicates (comparisons, IN lists, IS NULL tests) in one filter, so that a
/// filter always fits the expression limits of the stores.
pub const MAX_PREDICATES: usize = 100;
/// Most values in one IN list.
pub const MAX_IN_VALUES: usize = 1000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SystemField {
    ProducerId,
    ProducerRole,
    ProducedForId,
    CreatedAt,
    EpisodeType,
    // Fields of semantic features.
    SetId,
    Category,
    Tag,
    Feature,
    Value,
    UpdatedAt,
}

impl SystemField {
    /// The bare fields of episode filters.
    pub const ALL: [(&'static str, SystemField); 5] = [
        ("producer_id", SystemField::ProducerId),
        ("producer_role", SystemField::ProducerRole),
        ("produced_for_id", SystemField::ProducedForId),
        ("created_at", SystemField::CreatedAt),
        ("episode_type", SystemField::EpisodeType),
    ];

    /// The bare fields of semantic feature filters.
    pub const FEATURE: [(&'static str, SystemField); 7] = [
        ("set_id", SystemField::SetId),
        ("category", SystemField::Category),
        ("tag", SystemField::Tag),
        ("feature", SystemField::Feature),
        ("value", SystemField::Value),
        ("created_at", SystemField::CreatedAt),
        ("updated_at", SystemField::UpdatedAt),
    ];

    /// Whether the field holds a time (compared with RFC 3339 or Unix seconds).
    pub fn is_time(self) -> bool {
        matches!(self, SystemField::CreatedAt | SystemField::UpdatedAt)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Field {
    System(SystemField),
    Metadata(String),
}

#[derive(Debug, Clone, PartialEq)]
pub enum Literal {
    Str(String),
    Num(f64),
    /// Microseconds since the Unix epoch (only for `created_at`).
    Time(i64),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpOp {
    Eq,
    Ne,
    Gt,
    Lt,
    Ge,
    Le,
}

impl CmpOp {
    pub fn sql(self) -> &'static str {
        match self {
            CmpOp::Eq => "=",
            CmpOp::Ne => "!=",
            CmpOp::Gt => ">",
            CmpOp::Lt => "<",
            CmpOp::Ge => ">=",
            CmpOp::Le => "<=",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
    Not(Box<Expr>),
    Cmp {
        field: Field,
        op: CmpOp,
        value: Literal,
    },
    In {
        field: Field,
        values: Vec<Literal>,
        negated: bool,
    },
    IsNull {
        field: Field,
        negated: bool,
    },
}

/// A parse failure at a 1-based character position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterError {
    pub position: usize,
    pub message: String,
}

impl std::fmt::Display for FilterError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "at position {}: {}", self.position, self.message)
    }
}

impl FilterError {
    /// The domain error for the request field `field`.
    pub fn into_error(self, field: &str) -> Error {
        Error::invalid(field, format!("malformed filter {self}"))
    }
}

/// `value` as a string literal of the filter language, for clients and tests that write
/// filters. The server never composes a scope as text: see [`confine`].
pub fn quote(value: &str) -> String {
    format!("'{}'", value.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// `field = value`: a scope the server builds as a value (never as filter text).
pub fn equals(field: Field, value: &str) -> Expr {
    Expr::Cmp {
        field,
        op: CmpOp::Eq,
        value: Literal::Str(value.to_string()),
    }
}

/// The caller's parsed filter narrowed by a scope the server built: an AND node over
/// both, so nothing the caller wrote can widen the scope (and the caller's errors were
/// found, at the caller's positions, before the scope joined it).
pub fn confine(caller: Option<Expr>, scope: Option<Expr>) -> Option<Expr> {
    match (caller, scope) {
        (Some(caller), Some(scope)) => Some(Expr::And(Box::new(scope), Box::new(caller))),
        (caller, None) => caller,
        (None, scope) => scope,
    }
}

/// Parses a filter; an empty or blank filter is `None` (match everything).
pub fn parse(input: &str) -> Result<Option<Expr>, FilterError> {
    parse_with(input, &SystemField::ALL)
}

/// Parses a filter over semantic features (`set_id`, `category`, `tag`, `feature`,
/// `value`, `created_at`, `updated_at`, `m.*`).
pub fn parse_features(input: &str) -> Result<Option<Expr>, FilterError> {
    parse_with(input, &SystemField::FEATURE)
}

fn parse_with(
    input: &str,
    fields: &'static [(&'static str, SystemField)],
) -> Result<Option<Expr>, FilterError> {
    if input.len() > MAX_FILTER_BYTES {
        return Err(FilterError {
            position: 1,
            message: format!("filter is longer than {MAX_FILTER_BYTES} bytes"),
        });
    }
    let tokens = lex(input)?;
    if tokens.len() == 1 {
        return Ok(None);
    }
    let mut parser = Parser {
        tokens,
        fields,
        pos: 0,
        depth: 0,
        predicates: 0,
    };
    let expr = parser.expr()?;
    let next = parser.peek();
    if next.kind != Tok::End {
        return Err(parser.error_at(next.position, "expected AND, OR or the end of the filter"));
    }
    Ok(Some(expr))
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Str(String),
    Num(f64),
    Op(CmpOp),
    LParen,
    RParen,
    Comma,
    End,
}

#[derive(Debug, Clone)]
struct Token {
    kind: Tok,
    /// 1-based character position of the token's first character.
    position: usize,
}

fn lex(input: &str) -> Result<Vec<Token>, FilterError> {
    let chars: Vec<char> = input.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let position = i + 1;
        let err = |message: String| FilterError { position, message };
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        let kind = match c {
            '(' => {
                i += 1;
                Tok::LParen
            }
            ')' => {
                i += 1;
                Tok::RParen
            }
            ',' => {
                i += 1;
                Tok::Comma
            }
            '=' => {
                i += if chars.get(i + 1) == Some(&'=') { 2 } else { 1 };
                Tok::Op(CmpOp::Eq)
            }
            '!' if chars.get(i + 1) == Some(&'=') => {
                i += 2;
                Tok::Op(CmpOp::Ne)
            }
            '<' | '>' => {
                let next = chars.get(i + 1).copied();
                let (op, len) = match (c, next) {
                    ('<', Some('=')) => (CmpOp::Le, 2),
                    ('<', Some('>')) => (CmpOp::Ne, 2),
                    ('<', _) => (CmpOp::Lt, 1),
                    (_, Some('=')) => (CmpOp::Ge, 2),
                    _ => (CmpOp::Gt, 1),
                };
                i += len;
                Tok::Op(op)
            }
            '\'' | '"' => {
                let quote = c;
                let mut value = String::new();
                i += 1;
                loop {
                    match chars.get(i) {
                        None => return Err(err("unterminated string".into())),
                        Some('\\') => match chars.get(i + 1) {
                            Some(&escaped) => {
                                value.push(escaped);
                                i += 2;
                            }
                            None => return Err(err("unterminated string".into())),
                        },
                        // A doubled quote is one quote (SQL's escape, which MemMachine's
                        // client writes).
                        Some(&ch) if ch == quote && chars.get(i + 1) == Some(&quote) => {
                            value.push(quote);
                            i += 2;
                        }
                        Some(&ch) if ch == quote => {
                            i += 1;
                            break;
                        }
                        Some(&ch) => {
                            value.push(ch);
                            i += 1;
                        }
                    }
                }
                Tok::Str(value)
            }
            c if c.is_ascii_digit() || c == '-' || c == '+' || c == '.' => {
                let start = i;
                i += 1;
                while i < chars.len() {
                    let ch = chars[i];
                    let exponent_sign =
                        matches!(ch, '+' | '-') && matches!(chars[i - 1], 'e' | 'E');
                    if ch.is_ascii_digit() || matches!(ch, '.' | 'e' | 'E') || exponent_sign {
                        i += 1;
                    } else {
                        break;
                    }
                }
                let text: String = chars[start..i].iter().collect();
                match text.parse::<f64>() {
                    Ok(n) if n.is_finite() => Tok::Num(n),
                    _ => return Err(err(format!("invalid number {text:?}"))),
                }
            }
            c if c.is_alphabetic() || c == '_' => {
                let start = i;
                while i < chars.len()
                    && (chars[i].is_alphanumeric() || matches!(chars[i], '_' | '.' | ':' | '-'))
                {
                    i += 1;
                }
                Tok::Ident(chars[start..i].iter().collect())
            }
            other => return Err(err(format!("unexpected character {other:?}"))),
        };
        tokens.push(Token { kind, position });
    }
    tokens.push(Token {
        kind: Tok::End,
        position: chars.len() + 1,
    });
    Ok(tokens)
}

struct Parser {
    tokens: Vec<Token>,
    /// The bare field names this filter may use.
    fields: &'static [(&'static str, SystemField)],
    pos: usize,
    depth: usize,
    predicates: usize,
}

impl Parser {
    fn peek(&self) -> &Token {
        &self.tokens[self.pos]
    }

    fn advance(&mut self) -> Token {
        let token = self.tokens[self.pos].clone();
        if token.kind != Tok::End {
            self.pos += 1;
        }
        token
    }

    fn error_at(&self, position: usize, message: &str) -> FilterError {
        let found = match &self.tokens.iter().find(|t| t.position == position) {
            Some(Token { kind: Tok::End, .. }) | None => "the end of the filter".to_string(),
            Some(Token { kind, .. }) => describe(kind),
        };
        FilterError {
            position,
            message: format!("{message}, found {found}"),
        }
    }

    fn error_here(&self, message: &str) -> FilterError {
        self.error_at(self.peek().position, message)
    }

    fn keyword(&self, word: &str) -> bool {
        matches!(&self.peek().kind, Tok::Ident(s) if s.eq_ignore_ascii_case(word))
    }

    fn eat_keyword(&mut self, word: &str) -> bool {
        let found = self.keyword(word);
        if found {
            self.advance();
        }
        found
    }

    fn expect(&mut self, kind: Tok, what: &str) -> Result<(), FilterError> {
        if self.peek().kind == kind {
            self.advance();
            Ok(())
        } else {
            Err(self.error_here(&format!("expected {what}")))
        }
    }

    fn nested<T>(
        &mut self,
        f: impl FnOnce(&mut Self) -> Result<T, FilterError>,
    ) -> Result<T, FilterError> {
        if self.depth >= MAX_DEPTH {
            return Err(self.error_here(&format!("nesting deeper than {MAX_DEPTH}")));
        }
        self.depth += 1;
        let result = f(self);
        self.depth -= 1;
        result
    }

    fn expr(&mut self) -> Result<Expr, FilterError> {
        let mut left = self.and_expr()?;
        while self.eat_keyword("OR") {
            let right = self.and_expr()?;
            left = Expr::Or(Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn and_expr(&mut self) -> Result<Expr, FilterError> {
        let mut left = self.unary()?;
        while self.eat_keyword("AND") {
            let right = self.unary()?;
            left = Expr::And(Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn unary(&mut self) -> Result<Expr, FilterError> {
        if self.eat_keyword("NOT") {
            return self.nested(|p| Ok(Expr::Not(Box::new(p.unary()?))));
        }
        if self.peek().kind == Tok::LParen {
            self.advance();
            let inner = self.nested(|p| p.expr())?;
            self.expect(Tok::RParen, "')'")?;
            return Ok(inner);
        }
        self.predicate()
    }

    fn predicate(&mut self) -> Result<Expr, FilterError> {
        self.predicates += 1;
        if self.predicates > MAX_PREDICATES {
            return Err(self.error_here(&format!("more than {MAX_PREDICATES} conditions")));
        }
        let field_token = self.peek().clone();
        let field = self.field()?;
        if self.eat_keyword("IS") {
            let negated = self.eat_keyword("NOT");
            if !self.eat_keyword("NULL") {
                return Err(self.error_here("expected NULL"));
            }
            return Ok(Expr::IsNull { field, negated });
        }
        let negated = self.eat_keyword("NOT");
        if negated && !self.keyword("IN") {
            return Err(self.error_here("expected IN after NOT"));
        }
        if self.eat_keyword("IN") {
            self.expect(Tok::LParen, "'(' after IN")?;
            let mut values = vec![self.literal(&field)?];
            while self.peek().kind == Tok::Comma {
                self.advance();
                if values.len() == MAX_IN_VALUES {
                    return Err(self.error_here(&format!("more than {MAX_IN_VALUES} values in IN")));
                }
                values.push(self.literal(&field)?);
            }
            self.expect(Tok::RParen, "',' or ')'")?;
            return Ok(Expr::In {
                field,
                values,
                negated,
            });
        }
        match self.peek().kind {
            Tok::Op(op) => {
                self.advance();
                let value = self.literal(&field)?;
                Ok(Expr::Cmp { field, op, value })
            }
            _ => Err(self.error_here(&format!(
                "expected a comparison operator, IN or IS after {}",
                describe(&field_token.kind)
            ))),
        }
    }

    fn field(&mut self) -> Result<Field, FilterError> {
        let token = self.peek().clone();
        let Tok::Ident(name) = &token.kind else {
            return Err(self.error_here("expected a field name"));
        };
        if let Some((prefix, key)) = name.split_once('.')
            && (prefix == "m" || prefix == "metadata")
        {
            if key.is_empty() {
                return Err(self.error_here("expected a metadata key after the '.'"));
            }
            self.advance();
            return Ok(Field::Metadata(key.to_string()));
        }
        match self.fields.iter().find(|(n, _)| *n == name.as_str()) {
            Some((_, field)) => {
                self.advance();
                Ok(Field::System(*field))
            }
            None => Err(FilterError {
                position: token.position,
                message: format!(
                    "unknown field {name:?}: use m.KEY or metadata.KEY for metadata, or one of \
                     {}",
                    self.fields
                        .iter()
                        .map(|(n, _)| *n)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            }),
        }
    }

    fn literal(&mut self, field: &Field) -> Result<Literal, FilterError> {
        let token = self.peek().clone();
        let literal = match &token.kind {
            Tok::Str(s) => Literal::Str(s.clone()),
            Tok::Num(n) => Literal::Num(*n),
            _ => return Err(self.error_here("expected a quoted string or a number")),
        };
        self.advance();
        let time_field = match field {
            Field::System(system) if system.is_time() => *system,
            _ => return Ok(literal),
        };
        let micros = match &literal {
            Literal::Str(s) => super::instant::parse(s).map(|t| t.timestamp_micros()),
            Literal::Num(n) => super::instant::from_unix(*n).map(|t| t.timestamp_micros()),
            Literal::Time(t) => Some(*t),
        };
        micros.map(Literal::Time).ok_or_else(|| FilterError {
            position: token.position,
            message: format!(
                "{} compares with an RFC 3339 timestamp, such as '2024-05-01T12:00:00Z', \
                 or Unix seconds",
                if time_field == SystemField::UpdatedAt {
                    "updated_at"
                } else {
                    "created_at"
                }
            ),
        })
    }
}

fn describe(kind: &Tok) -> String {
    match kind {
        Tok::Ident(s) => format!("{s:?}"),
        Tok::Str(s) => format!("string {s:?}"),
        Tok::Num(n) => format!("number {n}"),
        Tok::Op(op) => format!("'{}'", op.sql()),
        Tok::LParen => "'('".into(),
        Tok::RParen => "')'".into(),
        Tok::Comma => "','".into(),
        Tok::End => "the end of the filter".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(key: &str) -> Field {
        Field::Metadata(key.into())
    }

    #[test]
    fn blank_filter_matches_everything() {
        assert_eq!(parse("").unwrap(), None);
        assert_eq!(parse("  \t").unwrap(), None);
    }

    #[test]
    fn parses_comparisons_on_system_and_metadata_fields() {
        assert_eq!(
            parse("producer_id='Melanie'").unwrap().unwrap(),
            Expr::Cmp {
                field: Field::System(SystemField::ProducerId),
                op: CmpOp::Eq,
                value: Literal::Str("Melanie".into())
            }
        );
        assert_eq!(
            parse("metadata.turn >= 3").unwrap().unwrap(),
            Expr::Cmp {
                field: meta("turn"),
                op: CmpOp::Ge,
                value: Literal::Num(3.0)
            }
        );
        assert_eq!(
            parse("m.dia_id != \"D1:1\"").unwrap().unwrap(),
            Expr::Cmp {
                field: meta("dia_id"),
                op: CmpOp::Ne,
                value: Literal::Str("D1:1".into())
            }
        );
    }

    #[test]
    fn quoted_values_read_back_as_themselves() {
        for value in ["plain", "O'Brien", "back\\slash\\'", "\"both'\\"] {
            match parse(&format!("m.k = {}", quote(value))).unwrap().unwrap() {
                Expr::Cmp {
                    value: Literal::Str(s),
                    ..
                } => assert_eq!(s, value),
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn a_scope_is_an_and_node_over_the_parsed_filter() {
        let scope = || equals(Field::System(SystemField::ProducerId), "alice");
        assert_eq!(confine(None, None), None);
        assert_eq!(confine(None, Some(scope())), Some(scope()));
        // What reads as an escape in text is one OR inside the caller's own subtree.
        let caller = parse("producer_id = 'bob' OR producer_id = 'bob'").unwrap();
        let Some(Expr::And(left, right)) = confine(caller.clone(), Some(scope())) else {
            panic!("expected an AND at the top")
        };
        assert_eq!((*left, Some(*right)), (scope(), caller.clone()));
        assert_eq!(confine(caller.clone(), None), caller);
        // Text that would have closed the server's parenthesis does not parse, and its
        // error points into what the caller wrote.
        let err = parse("producer_id = 'bob') OR (producer_id = 'bob'").unwrap_err();
        assert_eq!(err.position, 20, "{err}");
    }

    #[test]
    fn a_doubled_quote_is_one_quote() {
        let name = |filter: &str| match parse(filter).unwrap().unwrap() {
            Expr::Cmp {
                value: Literal::Str(s),
                ..
            } => s,
            other => panic!("{other:?}"),
        };
        assert_eq!(name("m.name='O''Brien'"), "O'Brien");
        assert_eq!(name("m.name=\"say \"\"hi\"\"\""), "say \"hi\"");
        assert_eq!(name("m.name='a\\'b'"), "a'b");
        assert!(parse("m.name='O''").is_err());
    }

    #[test]
    fn or_binds_looser_than_and_and_not_binds_tightest() {
        let expr = parse("m.a = 1 or not m.b = 2 AND m.c IS NOT NULL")
            .unwrap()
            .unwrap();
        let Expr::Or(left, right) = expr else {
            panic!("expected OR at the top, got {expr:?}")
        };
        assert!(matches!(*left, Expr::Cmp { .. }));
        let Expr::And(not, is_null) = *right else {
            panic!("expected AND on the right")
        };
        assert!(matches!(*not, Expr::Not(_)));
        assert_eq!(
            *is_null,
            Expr::IsNull {
                field: meta("c"),
                negated: true
            }
        );
    }

    #[test]
    fn parses_in_lists_and_parentheses() {
        let expr = parse("(m.x IN ('a', 2) OR m.y NOT IN (\"b\")) AND m.z IS NULL")
            .unwrap()
            .unwrap();
        let Expr::And(left, _) = expr else { panic!() };
        let Expr::Or(in_list, not_in) = *left else {
            panic!()
        };
        assert_eq!(
            *in_list,
            Expr::In {
                field: meta("x"),
                values: vec![Literal::Str("a".into()), Literal::Num(2.0)],
                negated: false
            }
        );
        assert!(matches!(*not_in, Expr::In { negated: true, .. }));
    }

    #[test]
    fn created_at_takes_rfc3339_or_unix_seconds() {
        let Some(Expr::Cmp { value, .. }) = parse("created_at > '2023-05-08T13:56:00Z'").unwrap()
        else {
            panic!()
        };
        assert_eq!(value, Literal::Time(1_683_554_160_000_000));
        let Some(Expr::Cmp { value, .. }) = parse("created_at <= 1683554160").unwrap() else {
            panic!()
        };
        assert_eq!(value, Literal::Time(1_683_554_160_000_000));
        let err = parse("created_at > 'yesterday'").unwrap_err();
        assert_eq!(err.position, 14);
    }

    #[test]
    fn errors_name_the_position() {
        let err = parse("producer_id = ").unwrap_err();
        assert_eq!(err.position, 15, "{err}");
        let err = parse("producer_id = 'a' AND").unwrap_err();
        assert_eq!(err.position, 22, "{err}");
        let err = parse("nope = 'a'").unwrap_err();
        assert_eq!(err.position, 1);
        assert!(err.message.contains("unknown field"));
        let err = parse("m.a = 'x").unwrap_err();
        assert_eq!(err.position, 7);
        let err = parse("(m.a = 1").unwrap_err();
        assert_eq!(err.position, 9);
        let err = parse("m.a = 1 m.b = 2").unwrap_err();
        assert_eq!(err.position, 9);
        let err = parse("m.a ~ 1").unwrap_err();
        assert_eq!(err.position, 5);
    }

    #[test]
    fn limits_the_number_of_conditions_and_in_values() {
        let conditions = |n: usize| vec!["m.a = 1"; n].join(" OR ");
        assert!(parse(&conditions(MAX_PREDICATES)).is_ok());
        let err = parse(&conditions(MAX_PREDICATES + 1)).unwrap_err();
        assert!(err.message.contains("conditions"), "{err}");
        let values = |n: usize| format!("m.a IN ({})", vec!["1"; n].join(","));
        assert!(parse(&values(MAX_IN_VALUES)).is_ok());
        assert!(
            parse(&values(MAX_IN_VALUES + 1))
                .unwrap_err()
                .message
                .contains("IN")
        );
    }

    #[test]
    fn rejects_runaway_nesting_without_overflowing_the_stack() {
        let deep = format!("{}m.a = 1{}", "(".repeat(1_000), ")".repeat(1_000));
        assert!(parse(&deep).unwrap_err().message.contains("nesting"));
        let nots = format!("{}m.a = 1", "NOT ".repeat(1_000));
        assert!(parse(&nots).unwrap_err().message.contains("nesting"));
    }
}
