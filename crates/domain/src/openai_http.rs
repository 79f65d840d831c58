//! The HTTP side of the OpenAI-compatible clients ([`crate::embed::openai`] and
//! [`crate::llm::openai`], and the rerank client [`crate::rerank::remote`], which calls
//! the same kind of servers): the endpoint URL, the `reqwest` client and its `Authorization`
//! header, POSTs retried with backoff and jitter (or `Retry-After`), and error messages
//! from an OpenAI error body. Both clients talk to the same kind of server, so they are
//! meant to build, redact, retry and report alike; this keeps them so.
//!
//! What stays in each client is what differs: the request and response bodies, the retry
//! settings and log lines, the error types, and which refusals it answers by asking
//! differently.

use std::time::Duration;

use governor::DefaultDirectRateLimiter;
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderValue, RETRY_AFTER};
use reqwest::{StatusCode, Url};
use serde::Serialize;

use crate::backoff::Backoff;
use crate::secret::Secret;
use crate::urls::SecretUrl;
use serde::de::DeserializeOwned;

/// How much of an unexpected response body goes into an error message.
const BODY_SNIPPET: usize = 300;

/// What one kind of OpenAI-compatible endpoint is called in URLs and messages.
pub(crate) struct Api {
    /// Who reports a bad configuration, e.g. `openai embedder`.
    pub name: &'static str,
    /// What the endpoint is called in request errors, e.g. `embeddings endpoint`.
    pub endpoint: &'static str,
    /// The path after `{base}/v1/`, e.g. `embeddings`.
    pub path: &'static str,
    /// What a successful body should be, e.g. `OpenAI embeddings response`.
    pub response: &'static str,
    /// The longest `Retry-After` waited for between attempts; a longer one is cut to this.
    pub max_retry_after: Duration,
    /// Whether the server's error message is put on one line (and cut to a snippet) and
    /// FastAPI's `{"detail": [..]}` shown; when false the message is kept as sent.
    pub tidy_errors: bool,
}

/// One endpoint of an [`Api`]: where requests go and how they are sent.
pub(crate) struct Endpoint {
    api: &'static Api,
    client: reqwest::Client,
    url: Url,
    /// `url` without any password or query value, for messages and logs.
    display: String,
    /// `Bearer <key>`, marked sensitive; none without a key.
    authorization: Option<HeaderValue>,
    timeout: Duration,
}

/// How a request is sent again after a failure worth retrying (see [`Attempt::Retry`]).
pub(crate) struct Retries {
    /// Attempts after the first.
    pub max_retries: u32,
    /// Delay before the first retry (see [`Backoff`]; jittered down by up to half).
    pub backoff: Duration,
    /// Ceiling of the backoff delay.
    pub max_backoff: Duration,
}

/// A retry about to be waited for, for the caller's log line.
pub(crate) struct Retrying<'a> {
    /// The attempt that failed (1 = the first) and how many may be made.
    pub attempt: u32,
    pub of: u32,
    pub delay: Duration,
    /// What went wrong.
    pub message: &'a str,
}

/// What a request (with its retries) came to, when not a response.
pub(crate) enum Failed {
    /// A non-success status not worth retrying: refused as sent.
    Refused { status: StatusCode, message: String },
    /// Not worth sending again (see [`Attempt::Fatal`]).
    Fatal(String),
    /// Every attempt failed in a way worth retrying: the last one's message, saying how
    /// many were made, and the last `Retry-After` the endpoint gave.
    GaveUp {
        message: String,
        retry_after: Option<Duration>,
    },
}

/// What one POST came to, when not a response.
enum Attempt {
    /// Worth sending again: a transport error, `408`, `429` or `5xx`.
    Retry {
        /// The status, when the server answered (not for a transport error).
        status: Option<StatusCode>,
        message: String,
        retry_after: Option<Duration>,
    },
    /// Any other non-success status: the server refused the request as sent.
    Refused { status: StatusCode, message: String },
    /// Not worth sending again: the request cannot be built or was redirected, or a
    /// success body is not what the API answers (a wrong `base_url`).
    Fatal(String),
}

impl Endpoint {
    /// Checks `base_url`, `api_key` and `timeout` (above zero) and builds the HTTP client
    /// (no request is made); an error is a message starting with `api.name`.
    pub(crate) fn new(
        api: &'static Api,
        base_url: &SecretUrl,
        api_key: Option<&Secret>,
        timeout: Duration,
    ) -> Result<Endpoint, String> {
        Self::build(api, endpoint_url(api, base_url.expose())?, api_key, timeout)
    }

    /// As [`new`](Self::new), but at `{base_url}/{path}`, without putting `/v1` in
    /// between: for APIs that are not OpenAI's, such as `POST /rerank`.
    pub(crate) fn unversioned(
        api: &'static Api,
        base_url: &SecretUrl,
        api_key: Option<&Secret>,
        timeout: Duration,
    ) -> Result<Endpoint, String> {
        let url = crate::urls::join_path(&checked_url(api, base_url.expose())?, api.path);
        Self::build(api, url, api_key, timeout)
    }

    fn build(
        api: &'static Api,
        url: Url,
        api_key: Option<&Secret>,
        timeout: Duration,
    ) -> Result<Endpoint, String> {
        if timeout.is_zero() {
            return Err(format!("{}: timeout must be above zero", api.name));
        }
        let display = crate::urls::redact(url.as_str());

        // The key leaves its `Secret` only here, into a header value marked sensitive.
        let authorization = match api_key.map(|key| key.expose().trim()) {
            Some(key) if !key.is_empty() => {
                let mut value = HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| {
                    format!(
                        "{}: the API key has characters not allowed in an HTTP header",
                        api.name
                    )
                })?;
                value.set_sensitive(true);
                Some(value)
            }
            _ => None,
        };

        let client = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            .user_agent(concat!("memmachine/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| format!("{}: cannot build the HTTP client: {}", api.name, chain(&e)))?;

        Ok(Endpoint {
            api,
            client,
            url,
            display,
            authorization,
            timeout,
        })
    }

    /// The URL requests go to (password and query values redacted).
    pub(crate) fn display(&self) -> &str {
        &self.display
    }

    /// Sends `body` until a success (parsed as `T`), a failure not worth retrying, or
    /// `retries` running out. Each attempt first waits for its turn at `limiter`, if any;
    /// `on_retry` is told of each retry before it is waited for. A retryable status for
    /// which `refusal(status, message)` holds is [`Failed::Refused`] at once: some servers
    /// answer `500` to a field they do not take.
    pub(crate) async fn post_with_retries<T: DeserializeOwned>(
        &self,
        body: &impl Serialize,
        retries: &Retries,
        limiter: Option<&DefaultDirectRateLimiter>,
        on_retry: impl Fn(&Retrying<'_>),
        refusal: impl Fn(StatusCode, &str) -> bool,
    ) -> Result<T, Failed> {
        let attempts = retries.max_retries.saturating_add(1);
        let mut attempt = 0u32;
        let mut last_retry_after = None;
        loop {
            attempt += 1;
            if let Some(limiter) = limiter {
                limiter.until_ready().await;
            }
            let (message, retry_after) = match self.post(body).await {
                Ok(response) => return Ok(response),
                Err(Attempt::Fatal(message)) => return Err(Failed::Fatal(message)),
                Err(Attempt::Refused { status, message }) => {
                    return Err(Failed::Refused { status, message });
                }
                Err(Attempt::Retry {
                    status: Some(status),
                    message,
                    ..
                }) if refusal(status, &message) => {
                    return Err(Failed::Refused { status, message });
                }
                Err(Attempt::Retry {
                    message,
                    retry_after,
                    ..
                }) => (message, retry_after),
            };
            last_retry_after = retry_after.or(last_retry_after);
            if attempt >= attempts {
                return Err(Failed::GaveUp {
                    message: format!("{message} (gave up after {attempt} attempts)"),
                    retry_after: last_retry_after,
                });
            }
            let delay = match retry_after {
                Some(d) => d.min(self.api.max_retry_after),
                None => Backoff {
                    first: retries.backoff,
                    max: retries.max_backoff,
                    jitter: 0.5,
                }
                .delay(attempt - 1),
            };
            on_retry(&Retrying {
                attempt,
                of: attempts,
                delay,
                message: &message,
            });
            tokio::time::sleep(delay).await;
        }
    }

    /// Sends `body` once and parses a success as `T`. A success body cut off in transit
    /// is [`Attempt::Retry`]; one that is not a `T` is [`Attempt::Fatal`].
    async fn post<T: DeserializeOwned>(&self, body: &impl Serialize) -> Result<T, Attempt> {
        let mut builder = self.client.post(self.url.clone()).json(body);
        if let Some(auth) = &self.authorization {
            builder = builder.header(AUTHORIZATION, auth.clone());
        }
        let response = builder.send().await.map_err(|e| self.transport_error(e))?;
        let status = response.status();
        let retry_after = retry_after(response.headers());
        let bytes = match response.bytes().await {
            Ok(bytes) => bytes,
            Err(e) if status.is_success() => return Err(self.transport_error(e)),
            Err(_) => Default::default(),
        };

        if status.is_success() {
            return serde_json::from_slice::<T>(&bytes).map_err(|e| {
                Attempt::Fatal(format!(
                    "{} {} returned a response that is not an {} ({e}); body starts: {}",
                    self.api.endpoint,
                    self.display,
                    self.api.response,
                    snippet(&bytes)
                ))
            });
        }
        let message = format!(
            "{} {} returned {status}: {}",
            self.api.endpoint,
            self.display,
            error_message(&bytes, self.api.tidy_errors)
        );
        if retryable(status) {
            Err(Attempt::Retry {
                status: Some(status),
                message,
                retry_after,
            })
        } else {
            Err(Attempt::Refused { status, message })
        }
    }

    fn transport_error(&self, e: reqwest::Error) -> Attempt {
        let what = if e.is_timeout() {
            format!("timed out after {:?}", self.timeout)
        } else if e.is_connect() {
            "cannot connect".to_string()
        } else {
            "request failed".to_string()
        };
        let fatal = e.is_builder() || e.is_redirect();
        let message = format!(
            "{} {}: {what}: {}",
            self.api.endpoint,
            self.display,
            chain(&e.without_url())
        );
        if fatal {
            Attempt::Fatal(message)
        } else {
            Attempt::Retry {
                status: None,
                message,
                retry_after: None,
            }
        }
    }
}

/// `{base}/v1/{path}`, or `{base}/{path}` when `base` already ends in `/v1`; a query of
/// the base (`?api-version=...`, `?key=...`) stays after the whole path.
fn endpoint_url(api: &Api, base_url: &str) -> Result<Url, String> {
    let base = checked_url(api, base_url)?;
    let suffix = if base.path().trim_end_matches('/').ends_with("/v1") {
        api.path.to_string()
    } else {
        format!("v1/{}", api.path)
    };
    Ok(crate::urls::join_path(&base, &suffix))
}

/// `base_url` parsed, if it is an http(s) URL with a host. Errors show it redacted.
fn checked_url(api: &Api, base_url: &str) -> Result<Url, String> {
    let shown = crate::urls::redact(base_url.trim());
    let url = Url::parse(base_url.trim())
        .map_err(|e| format!("{}: invalid base_url {shown:?}: {e}", api.name))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(format!(
            "{}: base_url {shown:?} is not an http(s) URL",
            api.name
        ));
    }
    Ok(url)
}

fn retryable(status: StatusCode) -> bool {
    status == StatusCode::TOO_MANY_REQUESTS
        || status == StatusCode::REQUEST_TIMEOUT
        || status.is_server_error()
}

/// A `Retry-After` given in seconds, at most an hour (the HTTP-date form is ignored:
/// backoff applies).
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs.min(3600)));
    }
    let secs = value.parse::<f64>().ok()?;
    (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs.min(3600.0)))
}

/// The message of an error body: OpenAI's `{"error":{"message":..}}`, the
/// `{"error":".."}`, `{"message":".."}` or `{"detail":".."}` of other servers, else the
/// start of the body. See [`Api::tidy_errors`].
fn error_message(body: &[u8], tidy: bool) -> String {
    if let Ok(value) = serde_json::from_slice::<serde_json::Value>(body) {
        let message = value
            .pointer("/error/message")
            .or_else(|| value.get("error").filter(|e| e.is_string()))
            .or_else(|| value.get("message"))
            .or_else(|| value.get("detail").filter(|d| d.is_string()))
            .and_then(|m| m.as_str());
        if let Some(message) = message {
            return if tidy {
                one_line(message)
            } else {
                message.to_string()
            };
        }
        // FastAPI's 422: {"detail": [{"loc": [..], "msg": ..}, ..]}.
        if let Some(detail) = value.get("detail").filter(|_| tidy) {
            return snippet(detail.to_string().as_bytes());
        }
    }
    if body.is_empty() {
        "(empty body)".to_string()
    } else {
        snippet(body)
    }
}

/// The start of `body`, lossily decoded, on one line.
fn snippet(body: &[u8]) -> String {
    one_line(&String::from_utf8_lossy(body))
}

/// The start of `text` (what fits in an error message) on one line.
pub(crate) fn one_line(text: &str) -> String {
    let mut out: String = text.chars().take(BODY_SNIPPET).collect();
    if text.chars().count() > BODY_SNIPPET {
        out.push('…');
    }
    out.replace(['\n', '\r'], " ")
}

/// An error with its sources ("a: b: c"); reqwest's own message alone says little.
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEST_API: Api = Api {
        name: "test client",
        endpoint: "test endpoint",
        path: "things/make",
        response: "OpenAI thing",
        max_retry_after: Duration::from_secs(1),
        tidy_errors: true,
    };

    #[test]
    fn endpoint_accepts_base_with_or_without_v1() {
        for base in [
            "http://h:1",
            "http://h:1/",
            "http://h:1/v1",
            "http://h:1/v1/",
            " http://h:1/v1/ ",
        ] {
            assert_eq!(
                endpoint_url(&TEST_API, base).unwrap().as_str(),
                "http://h:1/v1/things/make",
                "{base}"
            );
        }
        assert_eq!(
            endpoint_url(&TEST_API, "https://gw.example/openai")
                .unwrap()
                .as_str(),
            "https://gw.example/openai/v1/things/make"
        );
        let bad = endpoint_url(&TEST_API, "not a url").unwrap_err();
        assert!(bad.starts_with("test client: invalid base_url"), "{bad}");
        let bad = endpoint_url(&TEST_API, "ftp://h/").unwrap_err();
        assert!(bad.ends_with("is not an http(s) URL"), "{bad}");
    }

    #[test]
    fn unversioned_endpoints_append_the_path_alone() {
        let timeout = Duration::from_secs(1);
        for (base, url) in [
            ("http://h:1", "http://h:1/things/make"),
            ("http://h:1/v1/", "http://h:1/v1/things/make"),
        ] {
            let e =
                Endpoint::unversioned(&TEST_API, &SecretUrl::from(base), None, timeout).unwrap();
            assert_eq!(e.display(), url, "{base}");
        }
        let bad = Endpoint::unversioned(&TEST_API, &SecretUrl::from("ftp://h"), None, timeout)
            .err()
            .unwrap();
        assert!(bad.ends_with("is not an http(s) URL"), "{bad}");
    }

    #[test]
    fn redacts_password_in_endpoint() {
        let e = Endpoint::new(
            &TEST_API,
            &SecretUrl::from("https://user:secret@h/"),
            None,
            Duration::from_secs(1),
        )
        .unwrap();
        assert!(!e.display().contains("secret"));
    }

    #[test]
    fn the_query_of_a_base_stays_after_the_path_and_is_never_shown() {
        let timeout = Duration::from_secs(1);
        for (base, url) in [
            ("https://h/v1?key=sk-q", "https://h/v1/things/make?key=sk-q"),
            (
                "https://u:pw@h/openai/?api-version=2024-02-01&key=sk-q",
                "https://u:pw@h/openai/v1/things/make?api-version=2024-02-01&key=sk-q",
            ),
        ] {
            assert_eq!(endpoint_url(&TEST_API, base).unwrap().as_str(), url);
            let e = Endpoint::new(&TEST_API, &SecretUrl::from(base), None, timeout).unwrap();
            assert!(!e.display().contains("sk-q"), "{}", e.display());
            assert!(!e.display().contains("pw"), "{}", e.display());
            assert!(e.display().contains("/things/make?"), "{}", e.display());
        }
        let unversioned = Endpoint::unversioned(
            &TEST_API,
            &SecretUrl::from("http://h:1/?key=sk-q"),
            None,
            timeout,
        )
        .unwrap();
        assert_eq!(unversioned.url.as_str(), "http://h:1/things/make?key=sk-q");
        assert_eq!(unversioned.display(), "http://h:1/things/make?key=***");
        // A base that is refused is not shown with its secrets either.
        let bad = Endpoint::new(
            &TEST_API,
            &SecretUrl::from("ftp://u:pw@h/?key=sk-q"),
            None,
            timeout,
        )
        .err()
        .unwrap();
        assert!(!bad.contains("sk-q") && !bad.contains("pw@"), "{bad}");
    }

    #[test]
    fn authorization_only_with_a_usable_key() {
        let timeout = Duration::from_secs(1);
        for key in [None, Some(""), Some("  ")] {
            let key = key.map(Secret::from);
            let e = Endpoint::new(
                &TEST_API,
                &SecretUrl::from("http://h"),
                key.as_ref(),
                timeout,
            )
            .unwrap();
            assert!(e.authorization.is_none(), "{key:?}");
        }
        let e = Endpoint::new(
            &TEST_API,
            &SecretUrl::from("http://h"),
            Some(&" sk-1 ".into()),
            timeout,
        )
        .unwrap();
        let auth = e.authorization.unwrap();
        assert_eq!(auth.to_str().unwrap(), "Bearer sk-1");
        assert!(auth.is_sensitive());
        let bad = Endpoint::new(
            &TEST_API,
            &SecretUrl::from("http://h"),
            Some(&"a\nb".into()),
            timeout,
        )
        .err()
        .unwrap();
        assert!(bad.starts_with("test client: the API key"), "{bad}");
    }

    #[test]
    fn retries_only_what_may_pass_later() {
        for s in [408, 429, 500, 502, 503] {
            assert!(retryable(StatusCode::from_u16(s).unwrap()), "{s}");
        }
        for s in [400, 401, 403, 404, 422] {
            assert!(!retryable(StatusCode::from_u16(s).unwrap()), "{s}");
        }
    }

    #[test]
    fn parses_retry_after_seconds() {
        let mut headers = HeaderMap::new();
        assert_eq!(retry_after(&headers), None);
        headers.insert(RETRY_AFTER, HeaderValue::from_static("3"));
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(3)));
        headers.insert(RETRY_AFTER, HeaderValue::from_static("0.5"));
        assert_eq!(retry_after(&headers), Some(Duration::from_millis(500)));
        headers.insert(RETRY_AFTER, HeaderValue::from_static("999999"));
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(3600)));
        headers.insert(
            RETRY_AFTER,
            HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"),
        );
        assert_eq!(retry_after(&headers), None);
    }

    #[test]
    fn extracts_error_messages() {
        for tidy in [true, false] {
            assert_eq!(
                error_message(br#"{"error":{"message":"bad model","type":"x"}}"#, tidy),
                "bad model"
            );
            assert_eq!(error_message(br#"{"error":"nope"}"#, tidy), "nope");
            assert_eq!(error_message(br#"{"message":"m"}"#, tidy), "m");
            assert_eq!(error_message(br#"{"detail":"d"}"#, tidy), "d");
            assert_eq!(
                error_message(b"<html>oops</html>", tidy),
                "<html>oops</html>"
            );
            assert_eq!(error_message(b"", tidy), "(empty body)");
        }
        let fastapi = br#"{"detail":[{"msg":"extra field"}]}"#;
        assert!(error_message(fastapi, true).contains("extra field"));
        assert_eq!(
            error_message(fastapi, false),
            String::from_utf8_lossy(fastapi)
        );
        let long = format!(r#"{{"message":"a\nb{}"}}"#, "c".repeat(400));
        let tidied = error_message(long.as_bytes(), true);
        assert!(
            tidied.starts_with("a b") && tidied.ends_with('…'),
            "{tidied}"
        );
        assert_eq!(tidied.chars().count(), BODY_SNIPPET + 1);
        let kept = error_message(long.as_bytes(), false);
        assert!(kept.starts_with("a\nb") && kept.len() == 403, "{kept}");
    }

    #[test]
    fn snippets_are_short_and_on_one_line() {
        assert_eq!(snippet(b"a\r\nb"), "a  b");
        let long = "é".repeat(BODY_SNIPPET + 5);
        let s = snippet(long.as_bytes());
        assert_eq!(s.chars().count(), BODY_SNIPPET + 1);
        assert!(s.ends_with('…'));
        assert_eq!(one_line("short"), "short");
    }
}
