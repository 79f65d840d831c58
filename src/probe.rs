//! `memmachine health`: asks a running server's `grpc.health.v1.Health/Check`, for
//! container probes and scripts (exit 0 only when the answer is SERVING).

use std::time::Duration;

use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

/// How to check a TLS server's certificate.
pub struct ProbeTls {
    /// CA certificate (PEM) file.
    pub ca: std::path::PathBuf,
    /// Name the certificate must carry (default: the host of the address).
    pub domain: Option<String>,
    /// Client certificate and key (PEM files), for servers that require one.
    pub identity: Option<(std::path::PathBuf, std::path::PathBuf)>,
}

/// The status `service` ("" for the server as a whole) reports at `addr`
/// (`host:port` or an `http(s)://` URL), within `timeout`; an error says why none came.
pub async fn check(
    addr: &str,
    service: &str,
    timeout: Duration,
    tls: Option<&ProbeTls>,
) -> Result<ServingStatus, String> {
    let (endpoint, url) = endpoint(addr, timeout, tls)?;
    let channel = endpoint.connect().await.map_err(|err| {
        let reason = connect_reason(&err, tls.is_some());
        format!("cannot connect to {url}: {reason}")
    })?;
    let response = HealthClient::new(channel)
        .check(HealthCheckRequest {
            service: service.to_string(),
        })
        .await
        .map_err(|status| format!("{url} answered {:?}: {}", status.code(), status.message()))?;
    Ok(ServingStatus::try_from(response.into_inner().status).unwrap_or(ServingStatus::Unknown))
}

/// The endpoint of a server at `addr` (`host:port`, or a URL) and its URL, with
/// `timeout` for connecting and for each call, over TLS when `tls` is given. Shared by
/// `memmachine health` and the client subcommands, so both take the same flags.
pub fn endpoint(
    addr: &str,
    timeout: Duration,
    tls: Option<&ProbeTls>,
) -> Result<(tonic::transport::Endpoint, String), String> {
    let scheme = if tls.is_some() { "https" } else { "http" };
    let url = if addr.contains("://") {
        addr.to_string()
    } else {
        format!("{scheme}://{addr}")
    };
    let mut endpoint = tonic::transport::Endpoint::from_shared(url.clone())
        .map_err(|err| format!("bad address {addr:?}: {err}"))?
        .connect_timeout(timeout)
        .timeout(timeout);
    if let Some(tls) = tls {
        let read = |path: &std::path::Path| {
            std::fs::read(path).map_err(|err| format!("cannot read {}: {err}", path.display()))
        };
        let mut config = tonic::transport::ClientTlsConfig::new()
            .ca_certificate(tonic::transport::Certificate::from_pem(read(&tls.ca)?));
        if let Some(domain) = &tls.domain {
            config = config.domain_name(domain);
        }
        if let Some((cert, key)) = &tls.identity {
            config = config.identity(tonic::transport::Identity::from_pem(
                read(cert)?,
                read(key)?,
            ));
        }
        endpoint = endpoint
            .tls_config(config)
            .map_err(|err| format!("TLS: {err}"))?;
    }
    Ok((endpoint, url))
}

/// Why a connection failed, named first (connection refused, timed out, DNS, TLS) and
/// then tonic's causes: its own message says only "transport error". `tls`: whether a
/// handshake was attempted, the one step left once the address resolved and answered.
pub fn connect_reason(err: &(dyn std::error::Error + 'static), tls: bool) -> String {
    let chain = error_chain(err);
    let lower = chain.to_lowercase();
    let mut kind = None;
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(cause) = source {
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            match io.kind() {
                std::io::ErrorKind::ConnectionRefused => kind = Some("connection refused"),
                std::io::ErrorKind::TimedOut => kind = kind.or(Some("timed out")),
                _ => {}
            }
        }
        if cause.is::<tokio::time::error::Elapsed>() {
            kind = kind.or(Some("timed out"));
        }
        source = cause.source();
    }
    let kind = kind.or_else(|| {
        if lower.contains("timed out") || lower.contains("timeout") {
            Some("timed out")
        } else if lower.contains("dns error") || lower.contains("failed to lookup address") {
            Some("DNS lookup failed")
        } else if tls {
            Some("TLS handshake failed")
        } else {
            None
        }
    });
    match kind {
        Some(kind) => format!("{kind} ({chain})"),
        None => chain,
    }
}

/// An error with its sources ("transport error: tcp connect error: Connection
/// refused").
pub fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}
