//! A connection to the server, carrying the API key and the addressed project.

use std::time::Duration;

use tonic::metadata::{AsciiMetadataValue, MetadataValue};
use tonic::transport::Channel;

use super::{CliError, ClientArgs};
use crate::probe::{ProbeTls, connect_reason, endpoint};
use memmachine_domain::auth::ROUTE_HEADER;
use memmachine_proto::v2::memory_service_client::MemoryServiceClient;
use memmachine_proto::v2::project_service_client::ProjectServiceClient;
use memmachine_proto::v2::semantic_service_client::SemanticServiceClient;

/// The environment variable holding the API key.
pub const API_KEY_ENV: &str = "MEMMACHINE_API_KEY";

/// Answers as large as the server accepts requests (a page of 1,000 long episodes).
const MAX_ANSWER_BYTES: usize = 64 * 1024 * 1024;

pub struct Client {
    channel: Channel,
    authorization: Option<AsciiMetadataValue>,
    /// The org and project the command addresses ("" is universal, as on the wire).
    pub org: String,
    pub project: String,
}

impl Client {
    /// Connects now, so that an unreachable server is reported as such (exit 3) and not
    /// as the first call's UNAVAILABLE.
    pub async fn connect(args: &ClientArgs) -> Result<Client, CliError> {
        let authorization = match std::env::var(API_KEY_ENV) {
            Ok(key) if !key.trim().is_empty() => Some(
                MetadataValue::try_from(format!("Bearer {}", key.trim())).map_err(|_| {
                    CliError::Usage(format!("{API_KEY_ENV} holds characters a key cannot"))
                })?,
            ),
            _ => None,
        };
        let tls = args.tls_ca.clone().map(|ca| ProbeTls {
            ca,
            domain: args.tls_domain.clone(),
            identity: args.tls_cert.clone().zip(args.tls_key.clone()),
        });
        let timeout = Duration::from_secs(args.timeout_secs.max(1));
        let connect_error = |reason: String| CliError::Connect {
            addr: args.addr.clone(),
            reason,
        };
        let (endpoint, _url) =
            endpoint(&args.addr, timeout, tls.as_ref()).map_err(connect_error)?;
        let channel = endpoint
            .connect()
            .await
            .map_err(|err| connect_error(connect_reason(&err, tls.is_some())))?;
        Ok(Client {
            channel,
            authorization,
            org: args.org.clone().unwrap_or_default(),
            project: args.project.clone(),
        })
    }

    /// `message` as a request with the key's `authorization` metadata, routed (for a
    /// proxy's project affinity) to the project the command addresses.
    pub fn request<T>(&self, message: T) -> tonic::Request<T> {
        self.request_for(&self.project, message)
    }

    /// `message` as a request for `project` of the addressed org.
    pub fn request_for<T>(&self, project: &str, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        if let Some(value) = &self.authorization {
            request
                .metadata_mut()
                .insert("authorization", value.clone());
        }
        // Ids are letters, digits and `_:-`: encoded, any of them is a valid value.
        if let Ok(route) = route_value(&self.org, project).parse() {
            request.metadata_mut().insert(ROUTE_HEADER, route);
        }
        request
    }

    /// The connection, for the services without a helper here.
    pub fn channel(&self) -> Channel {
        self.channel.clone()
    }

    pub fn memory(&self) -> MemoryServiceClient<Channel> {
        MemoryServiceClient::new(self.channel.clone()).max_decoding_message_size(MAX_ANSWER_BYTES)
    }

    pub fn projects(&self) -> ProjectServiceClient<Channel> {
        ProjectServiceClient::new(self.channel.clone()).max_decoding_message_size(MAX_ANSWER_BYTES)
    }

    pub fn semantic(&self) -> SemanticServiceClient<Channel> {
        SemanticServiceClient::new(self.channel.clone()).max_decoding_message_size(MAX_ANSWER_BYTES)
    }

    /// `LifecycleService`: feature history (and forgetting).
    pub fn lifecycle(
        &self,
    ) -> memmachine_proto::v2::lifecycle_service_client::LifecycleServiceClient<Channel> {
        memmachine_proto::v2::lifecycle_service_client::LifecycleServiceClient::new(
            self.channel.clone(),
        )
        .max_decoding_message_size(MAX_ANSWER_BYTES)
    }

    /// `org/project` as the user named them (universal when unset).
    pub fn project_name(&self) -> String {
        let or_universal = |s: &str| {
            if s.is_empty() {
                "universal".to_string()
            } else {
                s.to_string()
            }
        };
        format!(
            "{}/{}",
            or_universal(&self.org),
            or_universal(&self.project)
        )
    }
}

/// The routing key `ORG/PROJECT`, each id percent-encoded (ids may hold any letter).
pub fn route_value(org: &str, project: &str) -> String {
    use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
    const KEEP: &AsciiSet = &NON_ALPHANUMERIC.remove(b'_').remove(b':').remove(b'-');
    format!(
        "{}/{}",
        utf8_percent_encode(org, KEEP),
        utf8_percent_encode(project, KEEP)
    )
}
