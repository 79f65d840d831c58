//! The admission layer's flags, environment variables and config file keys.

use serde::{Deserialize, Serialize};

use super::limits::CallerLimits;

#[derive(Debug, Clone, clap::Args, Serialize, Deserialize)]
// Sections share one command: clap's group per struct name would clash.
#[group(skip)]
pub struct Flags {
    /// A browser origin (scheme://host:port) that may call the server besides its own
    /// pages; repeatable. With --auth and none given, any origin may (keys are bearer
    /// tokens) [default: none]
    #[arg(
        long = "allowed-origin",
        env = "MEMMACHINE_ALLOWED_ORIGINS",
        value_delimiter = ','
    )]
    pub allowed_origins: Vec<String>,
    /// A host name the server answers to without --auth, besides IP addresses and
    /// localhost (a guard against DNS rebinding); repeatable, `*` for any [default: none]
    #[arg(
        long = "allowed-host",
        env = "MEMMACHINE_ALLOWED_HOSTS",
        value_delimiter = ','
    )]
    pub allowed_hosts: Vec<String>,
    /// Requests per second per API key (per IP address without --auth); 0 is unlimited
    #[arg(long, env = "MEMMACHINE_RATE_LIMIT", default_value_t = 0)]
    pub rate_limit: u32,
    /// Requests a caller may send at once above --rate-limit [default: twice the rate]
    #[arg(long, env = "MEMMACHINE_RATE_BURST")]
    pub rate_burst: Option<u32>,
    /// Calls one API key (or IP address) may have in flight; 0 is unlimited
    #[arg(long, env = "MEMMACHINE_MAX_CONCURRENT_PER_KEY", default_value_t = 64)]
    pub max_concurrent_per_key: u32,
    /// Longest a call may run, in seconds; a client's grpc-timeout may shorten it
    #[arg(long, env = "MEMMACHINE_REQUEST_TIMEOUT", default_value_t = 60.0)]
    pub request_timeout: f64,
    /// Seconds between reporting NOT_SERVING on shutdown and refusing new calls, for
    /// load balancers to notice
    #[arg(long, env = "MEMMACHINE_DRAIN_DELAY", default_value_t = 0.0)]
    pub drain_delay: f64,
    /// Most open health Watch streams per client address
    #[arg(
        long,
        env = "MEMMACHINE_MAX_WATCH_STREAMS_PER_PEER",
        default_value_t = 16
    )]
    pub max_watch_streams_per_peer: usize,
}

impl Flags {
    pub fn caller_limits(&self) -> CallerLimits {
        let rate = self.rate_limit;
        CallerLimits {
            rate,
            burst: self.rate_burst.unwrap_or(rate.saturating_mul(2)).max(rate),
            concurrent: self.max_concurrent_per_key,
        }
    }
}
