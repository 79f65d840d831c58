//! The change feed's flags, environment variables and config file keys.

use std::time::Duration;

#[derive(Debug, Clone, clap::Args, serde::Serialize, serde::Deserialize)]
// Sections share one command: clap's group per struct name would clash.
#[group(skip)]
pub struct Flags {
    /// Seconds of change log kept: a watcher may resume from a cursor this old (older
    /// is OUT_OF_RANGE); a client offline overnight must be able to resume
    #[arg(
        long,
        env = "MEMMACHINE_CHANGE_FEED_RETENTION",
        default_value_t = 86_400.0
    )]
    pub change_feed_retention: f64,
    /// Seconds between looks at the change log for writes through other replicas
    /// (writes through this one wake watchers at once)
    #[arg(long, env = "MEMMACHINE_WATCH_POLL_INTERVAL", default_value_t = 0.05)]
    pub watch_poll_interval: f64,
    /// Seconds a change-stream client may leave a ready change untaken before it is
    /// cut off (RESOURCE_EXHAUSTED: it reads too slowly)
    #[arg(long, env = "MEMMACHINE_WATCH_SEND_TIMEOUT", default_value_t = 30.0)]
    pub watch_send_timeout: f64,
    /// Most open change streams (WatchChanges, the SSE route) per API key (per IP
    /// address without --auth)
    #[arg(
        long,
        env = "MEMMACHINE_MAX_CHANGE_STREAMS_PER_KEY",
        default_value_t = 1000
    )]
    pub max_change_streams_per_key: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChangeFeedSettings {
    pub retention: Duration,
    pub poll_interval: Duration,
    pub send_timeout: Duration,
    pub max_streams_per_key: usize,
}

impl Default for ChangeFeedSettings {
    fn default() -> Self {
        crate::flags::defaults::<Flags>()
            .settings()
            .expect("the declared defaults are valid")
    }
}

impl Flags {
    pub fn settings(&self) -> Result<ChangeFeedSettings, String> {
        Ok(ChangeFeedSettings {
            retention: crate::flags::positive(self.change_feed_retention, "change-feed-retention")?,
            poll_interval: crate::flags::positive(self.watch_poll_interval, "watch-poll-interval")?,
            send_timeout: crate::flags::positive(self.watch_send_timeout, "watch-send-timeout")?,
            max_streams_per_key: self.max_change_streams_per_key,
        })
    }
}
