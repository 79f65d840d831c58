//! How hybrid ranking weighs its parts, per project, and the parts of one episode's
//! score. Defined here as part of the project model (the stores persist it); the
//! domain re-exports both from `retrieval::weights` and checks there, at compile time,
//! that the defaults equal the constants of `retrieval::fusion`.

use serde::{Deserialize, Serialize};

/// Largest weight accepted: far beyond any useful value (the parts are in standard
/// deviations), small enough that no sum overflows.
pub const MAX_WEIGHT: f32 = 100.0;

/// How hybrid ranking weighs its parts, per project (defaults from measurement,
/// BENCHMARKS.md). Stored as one JSON object: a field it lacks takes its default, so
/// fields can be added without a migration.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RankingWeights {
    /// The standardised dense score against the lexical one.
    pub dense: f32,
    /// An episode's own similarity against each neighbour's, in its smoothed dense score.
    pub own_similarity: f32,
    /// Added (in standard deviations) for a turn produced by a participant the question
    /// names.
    pub participant: f32,
    /// Each neighbouring turn's similarity in an episode's smoothed dense score (against
    /// `own_similarity`): what the conversation around a turn adds.
    pub context: f32,
    /// Added (in standard deviations of the turns' best fused scores by session) for the
    /// turns of a session that matches as a whole.
    pub session: f32,
    /// Added for a turn whose event falls in the period the question names.
    pub time: f32,
    /// Added for a turn that says when (a date, "yesterday"), to a question asking when.
    pub when: f32,
}

impl RankingWeights {
    /// Today's ranking (`retrieval::fusion`'s constants; the domain asserts they agree).
    pub const DEFAULT: RankingWeights = RankingWeights {
        dense: 1.0,
        own_similarity: 4.0,
        participant: 3.0,
        context: 1.0,
        session: 0.0,
        time: 3.0,
        when: 1.0,
    };

    /// The fields by name, in declaration order.
    pub fn fields(&self) -> [(&'static str, f32); 7] {
        [
            ("dense", self.dense),
            ("own_similarity", self.own_similarity),
            ("participant", self.participant),
            ("context", self.context),
            ("session", self.session),
            ("time", self.time),
            ("when", self.when),
        ]
    }

    /// Each weight finite and from 0 to [`MAX_WEIGHT`], `own_similarity` above 0; the
    /// message names the first field that is not.
    pub fn validate(&self) -> Result<(), String> {
        match self
            .fields()
            .into_iter()
            .find_map(|(f, v)| check(f, v).err())
        {
            Some((field, problem)) => Err(format!("ranking_weights.{field} {problem}")),
            None => Ok(()),
        }
    }
}

impl Default for RankingWeights {
    fn default() -> Self {
        RankingWeights::DEFAULT
    }
}

/// Whether one weight is acceptable: `Err((field, what is wrong))`.
pub fn check(field: &'static str, value: f32) -> Result<(), (&'static str, String)> {
    if !value.is_finite() || !(0.0..=MAX_WEIGHT).contains(&value) {
        return Err((
            field,
            format!("must be a finite number from 0 to {MAX_WEIGHT} (got {value})"),
        ));
    }
    if field == "own_similarity" && value <= 0.0 {
        return Err((field, format!("must be above 0 (got {value})")));
    }
    Ok(())
}

/// A partial update of [`RankingWeights`]: `None` keeps the current value. Serialised
/// with only the fields set (what the stores merge into the stored object).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct RankingWeightsUpdate {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dense: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub own_similarity: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub participant: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<f32>,
}

impl RankingWeightsUpdate {
    pub fn is_empty(&self) -> bool {
        *self == RankingWeightsUpdate::default()
    }

    pub fn apply(&self, to: RankingWeights) -> RankingWeights {
        RankingWeights {
            dense: self.dense.unwrap_or(to.dense),
            own_similarity: self.own_similarity.unwrap_or(to.own_similarity),
            participant: self.participant.unwrap_or(to.participant),
            context: self.context.unwrap_or(to.context),
            session: self.session.unwrap_or(to.session),
            time: self.time.unwrap_or(to.time),
            when: self.when.unwrap_or(to.when),
        }
    }

    /// The fields set, by name.
    pub fn fields(&self) -> impl Iterator<Item = (&'static str, f32)> {
        [
            ("dense", self.dense),
            ("own_similarity", self.own_similarity),
            ("participant", self.participant),
            ("context", self.context),
            ("session", self.session),
            ("time", self.time),
            ("when", self.when),
        ]
        .into_iter()
        .filter_map(|(f, v)| Some((f, v?)))
    }

    /// Every field set acceptable (each weight is checked on its own, so an update
    /// that passes leaves valid weights valid): `Err((field, what is wrong))`.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        self.fields().try_for_each(|(f, v)| check(f, v))
    }
}

/// The weights as stored (one JSON text column): `None` for the defaults.
pub fn weights_to_json(weights: &RankingWeights) -> Option<String> {
    (*weights != RankingWeights::DEFAULT)
        .then(|| serde_json::to_string(weights).expect("weights serialise"))
}

/// The stored weights after `update`: only the fields ever set are kept, so a field
/// never set follows the defaults of the running version (as PostgreSQL's JSON merge
/// does); `stored` unchanged when the update sets none.
pub fn merge_weights_json(stored: Option<&str>, update: &RankingWeightsUpdate) -> Option<String> {
    if update.is_empty() {
        return stored.map(str::to_string);
    }
    let mut fields = stored
        .and_then(|s| serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(s).ok())
        .unwrap_or_default();
    for (name, value) in update.fields() {
        fields.insert(name.to_string(), serde_json::json!(value));
    }
    Some(serde_json::Value::Object(fields).to_string())
}

/// Stored weights: NULL, or fields absent, take the defaults; an unreadable value (a
/// later version's, say) takes the defaults too rather than failing every search.
pub fn weights_from_json(stored: Option<&str>) -> RankingWeights {
    stored
        .and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or_default()
}

/// The parts of one episode's score (what a user sees to know why it ranked).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct ScoreParts {
    /// Standardised BM25, including the conversational context field.
    pub lexical: f32,
    /// Standardised smoothed similarity times its weight.
    pub dense: f32,
    /// What neighbouring turns added.
    pub context: f32,
    /// What the episode's session as a whole added.
    pub session: f32,
    /// What the question's time expression added.
    pub time: f32,
    /// The lift for a turn produced by a participant the question names.
    pub participant: f32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_update_keeps_only_the_fields_ever_set() {
        let dense = RankingWeightsUpdate {
            dense: Some(2.0),
            ..Default::default()
        };
        let once = merge_weights_json(None, &dense).unwrap();
        assert_eq!(once, r#"{"dense":2.0}"#);
        let time = RankingWeightsUpdate {
            time: Some(0.0),
            ..Default::default()
        };
        let twice = merge_weights_json(Some(&once), &time).unwrap();
        let read = weights_from_json(Some(&twice));
        assert_eq!((read.dense, read.time), (2.0, 0.0));
        assert_eq!(
            read.when,
            RankingWeights::DEFAULT.when,
            "never set: the default"
        );
        let unchanged = RankingWeightsUpdate::default();
        assert_eq!(merge_weights_json(Some(&twice), &unchanged), Some(twice));
        assert_eq!(merge_weights_json(None, &unchanged), None);
    }

    #[test]
    fn weights_store_as_json_with_defaults_for_what_is_missing() {
        assert_eq!(weights_to_json(&RankingWeights::default()), None);
        assert_eq!(weights_from_json(None), RankingWeights::DEFAULT);
        let partial = weights_from_json(Some(r#"{"dense": 2.5, "later_field": 1}"#));
        assert_eq!(partial.dense, 2.5);
        assert_eq!(partial.own_similarity, 4.0);
        let set = RankingWeights {
            time: 0.5,
            ..RankingWeights::DEFAULT
        };
        assert_eq!(weights_from_json(weights_to_json(&set).as_deref()), set);
        assert_eq!(weights_from_json(Some("not json")), RankingWeights::DEFAULT);
    }

    #[test]
    fn validation_names_the_field() {
        assert_eq!(RankingWeights::DEFAULT.validate(), Ok(()));
        let bad = |w: RankingWeights| w.validate().unwrap_err();
        let d = RankingWeights::DEFAULT;
        assert!(bad(RankingWeights { dense: -1.0, ..d }).starts_with("ranking_weights.dense "));
        assert!(
            bad(RankingWeights {
                time: f32::NAN,
                ..d
            })
            .starts_with("ranking_weights.time ")
        );
        assert!(bad(RankingWeights { session: 1e9, ..d }).contains("session"));
        let zero = bad(RankingWeights {
            own_similarity: 0.0,
            ..d
        });
        assert!(
            zero.starts_with("ranking_weights.own_similarity must be above 0"),
            "{zero}"
        );
        let update = RankingWeightsUpdate {
            participant: Some(101.0),
            ..Default::default()
        };
        assert_eq!(update.check().unwrap_err().0, "participant");
        assert_eq!(
            serde_json::to_string(&RankingWeightsUpdate {
                dense: Some(2.0),
                ..Default::default()
            })
            .unwrap(),
            r#"{"dense":2.0}"#
        );
    }
}
