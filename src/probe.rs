//! `memmachine health`: asks a running server's `grpc.health.v1.Health/Check`, for
//! container probes and scripts (exit 0 only when the answer is SERVING).

use std::time::Duration;

use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

/// The status `service` ("" for the server as a whole) reports at `addr`
/// (`host:port` or an `http://` URL), within `timeout`; an error says why none came.
pub async fn check(addr: &str, service: &str, timeout: Duration) -> Result<ServingStatus, String> {
    let url = if addr.contains("://") {
        addr.to_string()
    } else {
        format!("http://{addr}")
    };
    let endpoint = tonic::transport::Endpoint::from_shared(url.clone())
        .map_err(|err| format!("bad address {addr:?}: {err}"))?
        .connect_timeout(timeout)
        .timeout(timeout);
    let channel = endpoint
        .connect()
        .await
        .map_err(|err| format!("cannot connect to {url}: {err}"))?;
    let response = HealthClient::new(channel)
        .check(HealthCheckRequest {
            service: service.to_string(),
        })
        .await
        .map_err(|status| format!("{url} answered {:?}: {}", status.code(), status.message()))?;
    Ok(ServingStatus::try_from(response.into_inner().status).unwrap_or(ServingStatus::Unknown))
}
