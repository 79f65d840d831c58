//! When an episode expires: the earlier of its own `expires_at` and its `created_at`
//! plus the project's retention. Reads drop expired episodes before the sweeper has
//! deleted them, so an expired episode is never answered.

use crate::model::filter::{CmpOp, Expr, Field, Literal, SystemField};
use crate::model::{Episode, EpisodicConfig};

/// The expiry rules of one project at one instant.
#[derive(Debug, Clone, Copy)]
pub struct Expiry {
    retention: Option<i64>,
    now: i64,
}

impl Expiry {
    /// The project's rules now.
    pub fn of(config: &EpisodicConfig) -> Expiry {
        Expiry::at(config, chrono::Utc::now().timestamp_micros())
    }

    pub fn at(config: &EpisodicConfig, now: i64) -> Expiry {
        Expiry {
            retention: config.episode_retention_micros,
            now,
        }
    }

    /// The effective expiry of an episode with these stored times.
    pub fn effective(&self, created_at: i64, own: Option<i64>) -> Option<i64> {
        let by_retention = self.retention.map(|r| created_at.saturating_add(r));
        match (own, by_retention) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Whether the episode is still alive; it is given its effective expiry to answer.
    pub fn keep(&self, episode: &mut Episode) -> bool {
        let expiry = self.effective(episode.created_at_micros, episode.expires_at_micros);
        episode.expires_at_micros = expiry;
        expiry.is_none_or(|t| t > self.now)
    }

    /// The alive episodes of `episodes`, in order, each with its effective expiry.
    pub fn retain(&self, episodes: Vec<Episode>) -> Vec<Episode> {
        episodes
            .into_iter()
            .filter_map(|mut e| self.keep(&mut e).then_some(e))
            .collect()
    }

    /// The retention as a filter (`created_at` after the cutoff), which the store and the
    /// in-memory indexes apply while they read, so a long retention backlog never
    /// crowds a page or a ranking out. Own expiries are checked after reading.
    pub fn scope(&self) -> Option<Expr> {
        self.retention.map(|r| Expr::Cmp {
            field: Field::System(SystemField::CreatedAt),
            op: CmpOp::Gt,
            value: Literal::Time(self.now.saturating_sub(r)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(retention: Option<i64>) -> EpisodicConfig {
        EpisodicConfig {
            episode_retention_micros: retention,
            ..EpisodicConfig::default()
        }
    }

    #[test]
    fn the_earlier_of_own_expiry_and_retention_wins() {
        let e = Expiry::at(&config(Some(100)), 1_000);
        assert_eq!(e.effective(950, Some(2_000)), Some(1_050));
        assert_eq!(e.effective(950, Some(990)), Some(990));
        assert_eq!(e.effective(950, None), Some(1_050));
        let forever = Expiry::at(&config(None), 1_000);
        assert_eq!(forever.effective(0, None), None);
        assert_eq!(forever.effective(0, Some(1_000)), Some(1_000));
    }
}
