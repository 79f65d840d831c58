//! The connection limits' flags, environment variables and config file keys.

use serde::{Deserialize, Serialize};

use super::ConnectionLimits;

#[derive(Debug, Clone, clap::Args, Serialize, Deserialize)]
// Sections share one command: clap's group per struct name would clash.
#[group(skip)]
pub struct Flags {
    /// Most connections held at once on the gRPC and REST listeners together [default:
    /// the open-file limit, raised to its hard limit, less 64; at most 10000]
    #[arg(long, env = "MEMMACHINE_MAX_CONNECTIONS")]
    pub max_connections: Option<usize>,
    /// Seconds a new connection may take to send its first bytes before it is closed
    #[arg(long, env = "MEMMACHINE_PREFACE_TIMEOUT", default_value_t = 5.0)]
    pub preface_timeout: f64,
    /// Seconds a connection may take to send a request's headers (its first from when
    /// it opens, each next HTTP/1 one from the previous answer) before it is closed;
    /// also a request body's allowance before --min-body-rate applies
    #[arg(long, env = "MEMMACHINE_HEADER_TIMEOUT", default_value_t = 10.0)]
    pub header_timeout: f64,
    /// Bytes a second a request body must keep up, after the header timeout's
    /// allowance, until the server answers; a slower one is cut off (408,
    /// DEADLINE_EXCEEDED)
    #[arg(long, env = "MEMMACHINE_MIN_BODY_RATE", default_value_t = 1024)]
    pub min_body_rate: u64,
    /// Seconds a connection may sit idle before the server pings it; 0 sends no pings
    #[arg(long, env = "MEMMACHINE_KEEPALIVE_INTERVAL", default_value_t = 30.0)]
    pub keepalive_interval: f64,
    /// Seconds the server waits for a ping's answer before closing the connection
    #[arg(long, env = "MEMMACHINE_KEEPALIVE_TIMEOUT", default_value_t = 10.0)]
    pub keepalive_timeout: f64,
    /// Seconds a connection may stay open with no call or request in progress; then it
    /// is closed (REST: gracefully, with GOAWAY on HTTP/2; gRPC: its socket, as tonic
    /// offers no per-connection GOAWAY; no call is open, so none fails). 0 keeps idle
    /// connections for ever
    #[arg(long, env = "MEMMACHINE_IDLE_TIMEOUT", default_value_t = 120.0)]
    pub idle_timeout: f64,
    /// Most connections one IP address may hold (gRPC and REST together). Past it, a new
    /// one is served health checks only (from the health reserve) and answers anything
    /// else RESOURCE_EXHAUSTED / 429. Behind a proxy every connection comes from the
    /// proxy's address: list it in --trusted-proxies. 0: no cap
    #[arg(
        long,
        env = "MEMMACHINE_MAX_CONNECTIONS_PER_PEER",
        default_value_t = 256
    )]
    pub max_connections_per_peer: usize,
    /// An IP address exempt from --max-connections-per-peer (a proxy or load balancer in
    /// front of the server, which holds the connections of many clients); repeatable
    /// [default: none]
    #[arg(
        long = "trusted-proxy",
        env = "MEMMACHINE_TRUSTED_PROXIES",
        value_delimiter = ','
    )]
    pub trusted_proxies: Vec<std::net::IpAddr>,
    /// Connections kept, beyond --max-connections, for health checks alone
    /// (`grpc.health.v1.Health/Check`, `GET /api/v2/health`): when every other place is
    /// taken (or an address is over --max-connections-per-peer), a probe still gets in.
    /// A connection in the reserve answers any other call RESOURCE_EXHAUSTED / 429, is
    /// closed after --header-timeout without a call, and one address holds at most one
    /// (trusted proxies any)
    #[arg(long, env = "MEMMACHINE_HEALTH_RESERVE", default_value_t = 4)]
    pub health_reserve: usize,
    /// Most concurrent HTTP/2 streams (calls) on one gRPC connection
    #[arg(
        long,
        env = "MEMMACHINE_MAX_STREAMS_PER_CONNECTION",
        default_value_t = 100
    )]
    pub max_streams_per_connection: u32,
}

impl Flags {
    pub fn limits(&self) -> Result<ConnectionLimits, String> {
        if self.min_body_rate == 0 {
            return Err("--min-body-rate must be at least 1".into());
        }
        Ok(ConnectionLimits {
            max: match self.max_connections {
                Some(0) => return Err("--max-connections must be at least 1".into()),
                Some(n) => n,
                None => ConnectionLimits::default_max(),
            },
            preface_timeout: memmachine_domain::flags::positive(
                self.preface_timeout,
                "preface-timeout",
            )?,
            header_timeout: memmachine_domain::flags::positive(
                self.header_timeout,
                "header-timeout",
            )?,
            min_body_rate: self.min_body_rate,
            idle_timeout: Some(memmachine_domain::flags::seconds(
                self.idle_timeout,
                "idle-timeout",
            )?)
            .filter(|t| !t.is_zero()),
            max_per_peer: self.max_connections_per_peer,
            trusted_proxies: self.trusted_proxies.clone(),
            health_reserve: self.health_reserve,
        })
    }
}
