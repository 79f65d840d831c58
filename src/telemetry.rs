//! Logs and traces: structured logs to stderr (`--log-format text|json`, filtered by
//! `RUST_LOG`, default `info`) and, with `--otlp-endpoint`, every span exported to an
//! OpenTelemetry collector over OTLP/HTTP (protobuf), `http://` or `https://` (trusting
//! the web PKI and the system's certificates, or those in `SSL_CERT_FILE`).

mod redact;

use memmachine_core::urls::SecretUrl;
use std::io::IsTerminal;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, Registry};

/// How log lines are written (`--log-format`).
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    clap::ValueEnum,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// The logs' and traces' flags, environment variables and config file keys.
#[derive(Debug, Clone, clap::Args, serde::Serialize, serde::Deserialize)]
// Sections share one command: clap's group per struct name would clash.
#[group(skip)]
pub struct Flags {
    /// Log format: text or json
    #[arg(long, env = "MEMMACHINE_LOG_FORMAT", value_enum, default_value_t)]
    pub log_format: LogFormat,
    /// OpenTelemetry collector (OTLP/HTTP, e.g. http://localhost:4318): export traces of
    /// every call (off when unset)
    #[arg(long, env = "MEMMACHINE_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<SecretUrl>,
}

/// Keeps the trace exporter running; dropping it sends the spans still buffered.
pub struct Telemetry {
    traces: Option<SdkTracerProvider>,
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(provider) = self.traces.take()
            && let Err(err) = provider.shutdown()
        {
            eprintln!("memmachine: flushing traces: {err}");
        }
    }
}

type Boxed = Box<dyn Layer<Registry> + Send + Sync>;

const EXPORT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// Most of a collector's answer that is read (its body is only an acknowledgement).
const MAX_ANSWER_BYTES: u64 = 4 * 1024 * 1024;

/// The exporter's HTTP client: the blocking reqwest client (with rustls) on the batch
/// exporter's own thread, which runs no async runtime.
#[derive(Debug)]
struct OtlpClient(reqwest::blocking::Client);

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for OtlpClient {
    async fn send_bytes(
        &self,
        request: http::Request<bytes::Bytes>,
    ) -> Result<http::Response<bytes::Bytes>, opentelemetry_http::HttpError> {
        use std::io::Read;
        let response = self
            .0
            .execute(reqwest::blocking::Request::try_from(request)?)?;
        let mut answer = http::Response::builder().status(response.status());
        if let Some(headers) = answer.headers_mut() {
            headers.extend(response.headers().clone());
        }
        let mut body = Vec::new();
        response.take(MAX_ANSWER_BYTES).read_to_end(&mut body)?;
        Ok(answer.body(body.into())?)
    }
}

/// Installs the global subscriber. `otlp` is the collector's base URL (traces go to
/// `{otlp}/v1/traces`) or its full traces URL; `secrets` are masked in every log line.
pub fn init(
    format: LogFormat,
    otlp: Option<&str>,
    secrets: &[String],
) -> Result<Telemetry, String> {
    let stderr = redact::Redacting::new(std::io::stderr, secrets);
    // sqlx logs PostgreSQL's notices ("extension already exists, skipping") at info.
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,sqlx::postgres::notice=warn"));
    let logs: Boxed = match format {
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .with_writer(stderr)
            .boxed(),
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_writer(stderr)
            .with_ansi(std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none())
            .boxed(),
    };
    let mut layers = vec![logs];
    let mut traces = None;
    if let Some(endpoint) = otlp {
        // Errors may quote the URL: never with its secrets.
        let failed = |err: &dyn std::fmt::Display| {
            memmachine_core::urls::redact_in(&format!("--otlp-endpoint {endpoint}: {err}"))
        };
        let url = traces_url(endpoint).map_err(|err| failed(&err))?;
        let client = reqwest::blocking::Client::builder()
            .timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|err| failed(&err))?;
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(OtlpClient(client))
            .with_endpoint(url)
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|err| failed(&err))?;
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(
                opentelemetry_sdk::Resource::builder()
                    .with_service_name("memmachine")
                    .build(),
            )
            .build();
        layers.push(
            tracing_opentelemetry::layer()
                .with_tracer(provider.tracer("memmachine"))
                .boxed(),
        );
        traces = Some(provider);
    }
    tracing_subscriber::registry()
        .with(layers)
        .with(filter)
        .init();
    Ok(Telemetry { traces })
}

/// The collector's traces URL: `endpoint` itself when its path ends in `/v1/traces`,
/// else `/v1/traces` appended to its path (before any query).
fn traces_url(endpoint: &str) -> Result<String, String> {
    let base = reqwest::Url::parse(endpoint.trim()).map_err(|err| err.to_string())?;
    if base.path().trim_end_matches('/').ends_with("/v1/traces") {
        return Ok(base.to_string());
    }
    Ok(memmachine_core::urls::join_path(&base, "v1/traces").to_string())
}

#[cfg(test)]
mod tests {
    use super::traces_url;

    #[test]
    fn traces_go_to_v1_traces_before_the_query() {
        for (endpoint, url) in [
            ("http://h:4318", "http://h:4318/v1/traces"),
            ("http://h:4318/", "http://h:4318/v1/traces"),
            ("http://h:4318/v1/traces", "http://h:4318/v1/traces"),
            ("https://h/otlp?token=t", "https://h/otlp/v1/traces?token=t"),
        ] {
            assert_eq!(traces_url(endpoint).unwrap(), url, "{endpoint}");
        }
        assert!(traces_url("not a url").is_err());
    }
}
