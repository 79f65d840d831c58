//! URLs as the server shows them, and endpoint paths joined to a base URL. Every URL an
//! operator configures (the store, the embedder, language model, reranker and OTLP
//! endpoints) may carry a secret in its user info (`postgres://user:pw@host/db`) or its
//! query (`?key=...`): whatever prints, logs or answers one goes through [`redact`] (or
//! [`redact_in`] for a message that may quote one), so that none is ever shown.

use url::Url;

/// What a secret part of a URL is shown as.
pub const MASK: &str = "***";

/// `url` with the password of its user info and every query and fragment value replaced
/// by [`MASK`]: `postgres://user:***@host/db`, `https://h/v1?key=***`. The rest is kept
/// as written. Text without `scheme://` is returned unchanged.
pub fn redact(url: &str) -> String {
    let Some(at) = url.find("://") else {
        return url.to_string();
    };
    let (scheme, rest) = (&url[..at + 3], &url[at + 3..]);
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let mut out = String::with_capacity(url.len());
    out.push_str(scheme);
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => {
            match userinfo.split_once(':') {
                Some((user, _password)) => {
                    out.push_str(user);
                    out.push(':');
                    out.push_str(MASK);
                }
                None => out.push_str(userinfo),
            }
            out.push('@');
            out.push_str(host);
        }
        None => out.push_str(authority),
    }
    let (before_fragment, fragment) = match tail.split_once('#') {
        Some((before, fragment)) => (before, Some(fragment)),
        None => (tail, None),
    };
    match before_fragment.split_once('?') {
        Some((path, query)) => {
            out.push_str(path);
            out.push('?');
            out.push_str(&masked_values(query));
        }
        None => out.push_str(before_fragment),
    }
    if let Some(fragment) = fragment {
        out.push('#');
        out.push_str(&masked_values(fragment));
    }
    out
}

/// `a=1&b&c=` as `a=***&***&c=`: names kept (they say what was set), values hidden; a
/// bare item may itself be a token.
fn masked_values(query: &str) -> String {
    query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((name, value)) if !value.is_empty() => format!("{name}={MASK}"),
            Some(_) => pair.to_string(),
            None if pair.is_empty() => String::new(),
            None => MASK.to_string(),
        })
        .collect::<Vec<_>>()
        .join("&")
}

/// A URL given by the operator that may carry credentials (`user:password@`, a key in
/// its query): `Debug`, `Display` and its serialized form are redacted as [`redact`]
/// shows it, so no log line or `config print` leaks them; [`SecretUrl::expose`] is
/// the one way to read it.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretUrl(String);

impl SecretUrl {
    pub fn new(url: impl Into<String>) -> SecretUrl {
        SecretUrl(url.into())
    }

    /// The URL itself, for the one place that connects to it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl From<String> for SecretUrl {
    fn from(url: String) -> SecretUrl {
        SecretUrl(url)
    }
}

impl From<&str> for SecretUrl {
    fn from(url: &str) -> SecretUrl {
        SecretUrl(url.to_string())
    }
}

impl std::str::FromStr for SecretUrl {
    type Err = std::convert::Infallible;

    fn from_str(text: &str) -> Result<SecretUrl, Self::Err> {
        Ok(SecretUrl::new(text))
    }
}

impl std::fmt::Debug for SecretUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", redact(&self.0))
    }
}

impl std::fmt::Display for SecretUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&redact(&self.0))
    }
}

impl serde::Serialize for SecretUrl {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&redact(&self.0))
    }
}

impl<'de> serde::Deserialize<'de> for SecretUrl {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<SecretUrl, D::Error> {
        String::deserialize(deserializer).map(SecretUrl)
    }
}

/// `text` with every URL in it (`scheme://...` up to a space, quote or bracket) passed
/// through [`redact`]: for error messages of libraries that may quote one.
pub fn redact_in(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let start = rest[..at]
            .char_indices()
            .rev()
            .find(|(_, c)| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
            .map_or(0, |(i, c)| i + c.len_utf8());
        let mut end = rest[at + 3..]
            .find(|c: char| {
                c.is_whitespace() || matches!(c, '"' | '\'' | '`' | '<' | '>' | ')' | ']')
            })
            .map_or(rest.len(), |i| at + 3 + i);
        // Punctuation closing a sentence is not part of the URL.
        while end > at + 3 && rest[..end].ends_with(['.', ',', ';', ':']) {
            end -= 1;
        }
        out.push_str(&rest[..start]);
        out.push_str(&redact(&rest[start..end]));
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// Query parameters whose values are settings, not secrets: kept out of
/// [`secrets_in`] so that masking them would not garble unrelated log text.
const PLAIN_PARAMS: &[&str] = &[
    "sslmode",
    "ssl-mode",
    "sslrootcert",
    "ssl-root-cert",
    "ssl-ca",
    "sslcert",
    "ssl-cert",
    "application_name",
    "host",
    "hostaddr",
    "port",
    "dbname",
    "user",
    "options",
    "statement-cache-capacity",
    "api-version",
    "model",
];

/// Shortest text [`secrets_in`] reports: a shorter one would mask common words.
const MIN_SECRET_CHARS: usize = 4;

/// The secret parts of `url` (its user info's password and its query and fragment
/// values, but those of [`PLAIN_PARAMS`]), each as written and percent-decoded: what
/// a log must never show, whichever library prints the URL or its parts.
pub fn secrets_in(url: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut add = |raw: &str| {
        // Decoded as a form value (`%40` and `+`), and with `+` kept as itself.
        let decoded = |text: &str| {
            url::form_urlencoded::parse(format!("v={text}").as_bytes())
                .next()
                .map(|(_, value)| value.into_owned())
                .unwrap_or_default()
        };
        for form in [
            raw.to_string(),
            decoded(raw),
            decoded(&raw.replace('+', "%2B")),
        ] {
            if form.chars().count() >= MIN_SECRET_CHARS && !found.contains(&form) {
                found.push(form);
            }
        }
    };
    let Some(at) = url.find("://") else {
        return found;
    };
    let rest = &url[at + 3..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    if let Some((userinfo, _)) = authority.rsplit_once('@')
        && let Some((_, password)) = userinfo.split_once(':')
    {
        add(password);
    }
    let query = tail.split_once('?').map_or("", |(_, q)| q);
    for part in query
        .split(['&', '#'])
        .chain(tail.split_once('#').map(|(_, f)| f))
    {
        match part.split_once('=') {
            Some((name, value)) => {
                let name = name.to_ascii_lowercase();
                if !PLAIN_PARAMS.contains(&name.as_str()) {
                    add(value);
                }
            }
            None => add(part),
        }
    }
    found
}

/// `base` with `suffix` appended to its path, before its query:
/// `https://h/v1?key=x` and `chat/completions` make `https://h/v1/chat/completions?key=x`
/// (pasting text after the URL would put the path inside the query).
pub fn join_path(base: &Url, suffix: &str) -> Url {
    let mut url = base.clone();
    let path = format!(
        "{}/{}",
        base.path().trim_end_matches('/'),
        suffix.trim_start_matches('/')
    );
    url.set_path(&path);
    url
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_and_query_values_are_masked_and_the_rest_kept() {
        for (url, shown) in [
            ("postgres://user:pw@host/db", "postgres://user:***@host/db"),
            (
                "postgresql://u:p%40ss@h:5432/db?sslmode=require&password=x",
                "postgresql://u:***@h:5432/db?sslmode=***&password=***",
            ),
            ("http://h:1/v1?key=sk-1", "http://h:1/v1?key=***"),
            ("https://tok@h/v1", "https://tok@h/v1"),
            ("https://u:@h/", "https://u:***@h/"),
            ("http://a:b@c@h/p?x=1#frag", "http://a:***@h/p?x=***#***"),
            ("http://h/?empty=&&bare", "http://h/?empty=&&***"),
            ("http://h:1", "http://h:1"),
            ("http://h/path", "http://h/path"),
            ("sqlite /data/memmachine.db", "sqlite /data/memmachine.db"),
            ("not a url", "not a url"),
        ] {
            assert_eq!(redact(url), shown, "{url}");
        }
    }

    #[test]
    fn urls_inside_messages_are_masked() {
        let message = "--otlp-endpoint https://u:secret@h/x?key=k: invalid (\"http://a:b@c\")";
        assert_eq!(
            redact_in(message),
            "--otlp-endpoint https://u:***@h/x?key=***: invalid (\"http://a:***@c\")"
        );
        assert_eq!(redact_in("no url here"), "no url here");
        assert_eq!(redact_in("→http://u:p@h é"), "→http://u:***@h é");
        assert_eq!(
            redact_in("x http://h/?a=1 y http://h2/?b=2"),
            "x http://h/?a=*** y http://h2/?b=***"
        );
    }

    #[test]
    fn the_secrets_of_a_url_are_its_password_and_secret_query_values() {
        let found =
            secrets_in("postgres://u:p%40ssword@h/db?sslmode=require&sslpassword=s3cret-x&a=b");
        assert_eq!(found, ["p%40ssword", "p@ssword", "s3cret-x"]);
        assert!(secrets_in("http://h:1/v1").is_empty());
        assert_eq!(secrets_in("https://h/v1#token=tok-123"), ["tok-123"]);
    }

    #[test]
    fn paths_go_before_the_query() {
        let join =
            |base: &str, suffix: &str| join_path(&Url::parse(base).unwrap(), suffix).to_string();
        assert_eq!(
            join("https://h/v1?key=x", "chat/completions"),
            "https://h/v1/chat/completions?key=x"
        );
        assert_eq!(
            join("https://h/v1/", "embeddings"),
            "https://h/v1/embeddings"
        );
        assert_eq!(join("http://h:1", "v1/traces"), "http://h:1/v1/traces");
        assert_eq!(
            join("http://h:1/base/?a=1&b=2", "/rerank"),
            "http://h:1/base/rerank?a=1&b=2"
        );
    }

    #[test]
    fn a_secret_url_shows_only_its_redacted_form() {
        let url: SecretUrl = "postgres://app:hunter2@db:5432/memory".parse().unwrap();
        for shown in [
            format!("{url}"),
            format!("{url:?}"),
            serde_json::to_string(&url).unwrap(),
        ] {
            assert!(!shown.contains("hunter2"), "{shown}");
            assert!(shown.contains("db:5432"), "{shown}");
        }
        assert_eq!(url.expose(), "postgres://app:hunter2@db:5432/memory");
        let read: SecretUrl = serde_json::from_str("\"http://k@h/v1\"").unwrap();
        assert_eq!(read.expose(), "http://k@h/v1");
    }
}
