//! The API key a benchmark sends as `authorization: Bearer ...` on every call.

use std::path::Path;

use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

use crate::Result;

/// Sends the API key, if there is one, with every call.
#[derive(Clone, Default)]
pub struct ApiKey(Option<MetadataValue<Ascii>>);

impl ApiKey {
    /// `Bearer <token>`; an error when the token cannot be a header value.
    pub fn bearer(token: &str) -> Result<ApiKey> {
        let value = format!("Bearer {}", token.trim())
            .parse()
            .map_err(|_| "the API key holds characters a header cannot carry")?;
        Ok(ApiKey(Some(value)))
    }

    /// The key of `MEMMACHINE_API_KEY`, or none when it is unset or empty.
    pub fn from_env() -> Result<ApiKey> {
        match std::env::var("MEMMACHINE_API_KEY") {
            Ok(token) if !token.trim().is_empty() => ApiKey::bearer(&token),
            _ => Ok(ApiKey::default()),
        }
    }

    /// Makes an admin key with the server's own `keys create` over its data directory.
    pub fn create_admin(executable: &Path, data_dir: &Path, label: &str) -> Result<ApiKey> {
        #[allow(
            clippy::disallowed_methods,
            reason = "a short command that ends by itself"
        )]
        let output = std::process::Command::new(executable)
            .args(["keys", "create", "--admin", "--label", label, "--data-dir"])
            .arg(data_dir)
            .output()?;
        if !output.status.success() {
            return Err(format!(
                "keys create failed: {}",
                String::from_utf8_lossy(&output.stderr)
            )
            .into());
        }
        ApiKey::bearer(&String::from_utf8(output.stdout)?)
    }
}

impl tonic::service::Interceptor for ApiKey {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> std::result::Result<tonic::Request<()>, tonic::Status> {
        if let Some(key) = &self.0 {
            request.metadata_mut().insert("authorization", key.clone());
        }
        Ok(request)
    }
}

/// A connection to the server that sends the API key.
pub type Link = InterceptedService<Channel, ApiKey>;
