//! Extraction scored against LoCoMo's annotated facts: fact recall (strict and by text
//! only), precision (the rule and the strict one), semantic duplicates, and fact
//! recall over prefixes of the turns. The rule is in the module doc of `semantic_quality`.
//! Text similarity is the cosine of the vectors an [`Embed`] gives (the local
//! all-MiniLM-L6-v2 in the bench, hand-made vectors in the tests).

use std::collections::{HashMap, HashSet};
use std::path::Path;

use memmachine_domain::embed::local::LocalEmbedder;
use memmachine_domain::embed::normalize;

use super::features::Listed;
use super::observations::Fact;
use crate::support::Result;
use crate::support::locomo::Conversation;

/// A feature as the facts see it: `"<feature name>: <value>"` (no tag: see the module
/// doc) and the turns it cites.
#[derive(Debug, Clone)]
pub struct FeatureText {
    pub set_id: String,
    pub text: String,
    /// `dia_id`s of its citations (citations naming no turn left out).
    pub cited: Vec<String>,
}

/// Texts to vectors (normalised here, so any scale will do).
pub trait Embed {
    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>>;
}

/// The local embedder, loaded in this process as the server loads it.
pub struct Local(LocalEmbedder);

impl Local {
    pub fn load(model_dir: &Path) -> Result<Local> {
        Ok(Local(LocalEmbedder::load(model_dir)?))
    }
}

impl Embed for Local {
    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>> {
        let mut out = Vec::with_capacity(texts.len());
        for chunk in texts.chunks(64) {
            out.extend(self.0.embed_blocking(chunk)?);
        }
        Ok(out)
    }
}

/// The thresholds of the rule.
#[derive(Debug, Clone, Copy)]
pub struct Thresholds {
    /// Least cosine of a fact and a feature that match (`--fact-threshold`).
    pub fact: f32,
    /// Least cosine of two features of a set that duplicate each other.
    pub duplicate: f32,
}

/// Two features this close say the same thing in other words.
pub const DUPLICATE_THRESHOLD: f32 = 0.9;

/// Fact recall over the first `turns` turns of each conversation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CurvePoint {
    pub turns: usize,
    /// Facts all of whose evidence lies within the prefix.
    pub facts: usize,
    /// Of those, matched (strict rule) by a feature citing only turns within it.
    pub matched: usize,
}

/// One conversation's figures (or their sums).
#[derive(Debug, Clone, Default)]
pub struct Scores {
    pub conversation: String,
    pub facts: usize,
    /// Facts matched by a feature citing one of their turns with similar text.
    pub strict: usize,
    /// Facts with a feature of similar text, whatever it cites.
    pub loose: usize,
    pub features: usize,
    /// Features matching a fact (strict rule).
    pub matching: usize,
    /// Features matching a fact or citing a turn that is evidence of one (the issue's
    /// precision).
    pub supporting: usize,
    /// Features as similar as [`Thresholds::duplicate`] to an earlier one of their set.
    pub semantic_dups: usize,
    pub curve: Vec<CurvePoint>,
    /// Per feature: the fact of highest similarity, that similarity, and whether the
    /// feature matches some fact.
    pub best: Vec<Best>,
}

#[derive(Debug, Clone, Default)]
pub struct Best {
    pub fact: Option<usize>,
    pub similarity: f32,
    pub matches: bool,
}

impl Scores {
    pub fn merge(&mut self, other: &Scores) {
        self.facts += other.facts;
        self.strict += other.strict;
        self.loose += other.loose;
        self.features += other.features;
        self.matching += other.matching;
        self.supporting += other.supporting;
        self.semantic_dups += other.semantic_dups;
        for point in &other.curve {
            match self.curve.iter_mut().find(|p| p.turns == point.turns) {
                Some(p) => {
                    p.facts += point.facts;
                    p.matched += point.matched;
                }
                None => self.curve.push(*point),
            }
        }
    }
}

/// The sums over conversations.
pub fn total(scores: &[Scores]) -> Scores {
    let mut total = Scores::default();
    for s in scores {
        total.merge(s);
    }
    total
}

pub fn share(n: usize, of: usize) -> f64 {
    if of == 0 {
        f64::NAN
    } else {
        n as f64 / of as f64
    }
}

fn unit_vectors(embed: &dyn Embed, texts: &[String]) -> Result<Vec<Vec<f32>>> {
    let mut vectors = embed.embed(texts)?;
    if vectors.len() != texts.len() {
        return Err(format!("{} vectors for {} texts", vectors.len(), texts.len()).into());
    }
    vectors.iter_mut().for_each(|v| normalize(v));
    Ok(vectors)
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Scores one conversation: its facts (already cut to the turns used), its features in
/// listing order, the position of each turn in the conversation, and the prefixes of
/// the curve.
pub fn score(
    embed: &dyn Embed,
    facts: &[Fact],
    features: &[FeatureText],
    positions: &HashMap<String, usize>,
    prefixes: &[usize],
    thresholds: Thresholds,
) -> Result<Scores> {
    let fact_texts: Vec<String> = facts.iter().map(|f| f.text.clone()).collect();
    let feature_texts: Vec<String> = features.iter().map(|f| f.text.clone()).collect();
    let fact_vectors = unit_vectors(embed, &fact_texts)?;
    let feature_vectors = unit_vectors(embed, &feature_texts)?;
    // similar[i][j]: fact i and feature j are similar enough.
    let mut similar = vec![vec![false; features.len()]; facts.len()];
    let mut best = vec![Best::default(); features.len()];
    for (i, fv) in fact_vectors.iter().enumerate() {
        for (j, gv) in feature_vectors.iter().enumerate() {
            let s = cosine(fv, gv);
            similar[i][j] = s >= thresholds.fact;
            if best[j].fact.is_none() || s > best[j].similarity {
                best[j].fact = Some(i);
                best[j].similarity = s;
            }
        }
    }
    let cites = |j: usize, fact: &Fact| {
        features[j]
            .cited
            .iter()
            .any(|id| fact.evidence.contains(id))
    };
    let matches = |i: usize, j: usize| similar[i][j] && cites(j, &facts[i]);
    let evidence: HashSet<&str> = facts
        .iter()
        .flat_map(|f| f.evidence.iter().map(String::as_str))
        .collect();
    let mut scores = Scores {
        facts: facts.len(),
        features: features.len(),
        ..Default::default()
    };
    for (i, row) in similar.iter().enumerate() {
        scores.strict += usize::from((0..features.len()).any(|j| matches(i, j)));
        scores.loose += usize::from(row.iter().any(|&s| s));
    }
    for (j, feature) in features.iter().enumerate() {
        let matching = (0..facts.len()).any(|i| matches(i, j));
        best[j].matches = matching;
        scores.matching += usize::from(matching);
        let supports = feature
            .cited
            .iter()
            .any(|id| evidence.contains(id.as_str()));
        scores.supporting += usize::from(matching || supports);
        let duplicate = (0..j).any(|k| {
            features[k].set_id == feature.set_id
                && cosine(&feature_vectors[j], &feature_vectors[k]) >= thresholds.duplicate
        });
        scores.semantic_dups += usize::from(duplicate);
    }
    // A turn the conversation does not hold lies past every prefix.
    let last = |ids: &[String]| {
        ids.iter()
            .map(|id| positions.get(id).copied().unwrap_or(usize::MAX))
            .max()
    };
    for &turns in prefixes {
        let inside = |ids: &[String]| last(ids).is_some_and(|p| p < turns);
        let usable: Vec<usize> = (0..features.len())
            .filter(|&j| inside(&features[j].cited))
            .collect();
        let counted: Vec<usize> = (0..facts.len())
            .filter(|&i| inside(&facts[i].evidence))
            .collect();
        let matched = counted
            .iter()
            .filter(|&&i| usable.iter().any(|&j| matches(i, j)))
            .count();
        scores.curve.push(CurvePoint {
            turns,
            facts: counted.len(),
            matched,
        });
    }
    scores.best = best;
    Ok(scores)
}

/// Every conversation's features against its facts, with the local model of
/// `model_dir`; `Err` says why they could not be scored.
pub fn evaluate(
    model_dir: &Path,
    conversations: &[Conversation],
    facts: &[Vec<Fact>],
    listed: &[Vec<Listed>],
    thresholds: Thresholds,
) -> std::result::Result<Vec<Scores>, String> {
    if !model_dir.join("config.json").is_file() {
        return Err(format!(
            "no all-MiniLM-L6-v2 at {} (`memmachine model fetch`; --model-dir)",
            model_dir.display()
        ));
    }
    let model = Local::load(model_dir).map_err(|err| err.to_string())?;
    let longest = conversations
        .iter()
        .map(|c| c.turns.len())
        .max()
        .unwrap_or(0);
    let prefixes = prefixes(longest);
    let mut all = Vec::new();
    for ((conversation, facts), listed) in conversations.iter().zip(facts).zip(listed) {
        let positions: HashMap<String, usize> = conversation
            .turns
            .iter()
            .enumerate()
            .map(|(i, t)| (t.dia_id.clone(), i))
            .collect();
        let features: Vec<FeatureText> = listed.iter().map(Listed::text).collect();
        let mut scores = score(&model, facts, &features, &positions, &prefixes, thresholds)
            .map_err(|err| err.to_string())?;
        scores.conversation = conversation.sample_id.clone();
        all.push(scores);
    }
    Ok(all)
}

/// The prefixes of the curve for conversations of at most `turns` turns: every 20
/// turns, or a multiple of 20 that keeps the table to 10 rows, and `turns` itself.
pub fn prefixes(turns: usize) -> Vec<usize> {
    let step = 20 * turns.div_ceil(200).max(1);
    let mut list: Vec<usize> = (1..).map(|i| i * step).take_while(|&p| p < turns).collect();
    list.push(turns);
    list
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One axis per topic word: texts sharing a topic are similar, others are not.
    struct Topics;

    const TOPICS: [&str; 4] = ["paint", "swim", "counsel", "dog"];

    impl Embed for Topics {
        fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>> {
            Ok(texts
                .iter()
                .map(|t| {
                    let t = t.to_lowercase();
                    let mut v: Vec<f32> = TOPICS
                        .iter()
                        .map(|w| f32::from(u8::from(t.contains(w))))
                        .collect();
                    v.push(0.1); // never a zero vector
                    v
                })
                .collect())
        }
    }

    fn fact(text: &str, evidence: &[&str]) -> Fact {
        Fact {
            speaker: "Melanie".into(),
            text: text.into(),
            evidence: evidence.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn feature(text: &str, cited: &[&str]) -> FeatureText {
        FeatureText {
            set_id: "set".into(),
            text: text.into(),
            cited: cited.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn positions(n: usize) -> HashMap<String, usize> {
        (0..n).map(|i| (format!("D1:{}", i + 1), i)).collect()
    }

    const T: Thresholds = Thresholds {
        fact: 0.5,
        duplicate: 0.9,
    };

    fn run(facts: &[Fact], features: &[FeatureText]) -> Scores {
        score(&Topics, facts, features, &positions(10), &[5, 10], T).expect("scores")
    }

    #[test]
    fn a_paraphrase_citing_the_right_turn_matches() {
        let facts = [fact("Melanie painted a lake sunrise last year.", &["D1:3"])];
        let s = run(&facts, &[feature("hobby: painting landscapes", &["D1:3"])]);
        assert_eq!((s.strict, s.loose, s.matching, s.supporting), (1, 1, 1, 1));
        assert!(s.best[0].matches);
        assert_eq!(s.best[0].fact, Some(0));
    }

    #[test]
    fn the_right_text_citing_another_turn_matches_only_loosely() {
        let facts = [fact("Melanie painted a lake sunrise last year.", &["D1:3"])];
        let s = run(&facts, &[feature("hobby: painting landscapes", &["D1:4"])]);
        assert_eq!((s.strict, s.loose), (0, 1));
        // D1:4 supports no fact: the feature counts under neither precision.
        assert_eq!((s.matching, s.supporting), (0, 0));
        assert!(!s.best[0].matches);
    }

    #[test]
    fn unrelated_text_citing_the_right_turn_does_not_match_but_supports() {
        let facts = [fact("Melanie painted a lake sunrise last year.", &["D1:3"])];
        let s = run(&facts, &[feature("pet: a dog named Luna", &["D1:3"])]);
        assert_eq!((s.strict, s.loose, s.matching), (0, 0, 0));
        // It cites a turn that is evidence of a fact: the precision counts it.
        assert_eq!(s.supporting, 1);
    }

    #[test]
    fn a_fact_with_many_turns_matches_through_any_of_them_and_counts_once_all_are_in() {
        let facts = [
            fact("Melanie swims with the kids.", &["D1:2", "D1:7"]),
            fact("Melanie likes to paint.", &["D1:1"]),
        ];
        let features = [
            feature("activity: swimming with kids", &["D1:2"]),
            feature("hobby: painting", &["D1:1", "D1:8"]),
            feature("hobby: painting, mostly lakes", &["D1:1"]),
        ];
        let s = run(&facts, &features);
        assert_eq!((s.strict, s.loose, s.features, s.matching), (2, 2, 3, 3));
        assert_eq!(s.semantic_dups, 1, "the third feature repeats the second");
        // Within 5 turns: the swimming fact's evidence runs to D1:7, so it is not
        // counted; the painting fact is, matched by the third feature (the second
        // cites D1:8, past the prefix).
        assert_eq!(
            s.curve,
            [
                CurvePoint {
                    turns: 5,
                    facts: 1,
                    matched: 1
                },
                CurvePoint {
                    turns: 10,
                    facts: 2,
                    matched: 2
                },
            ]
        );
    }

    #[test]
    fn duplicates_are_counted_within_a_set_only() {
        let mut other = feature("hobby: painting", &[]);
        other.set_id = "other".into();
        let features = [feature("hobby: painting", &[]), other];
        let s = run(&[], &features);
        assert_eq!(s.semantic_dups, 0);
        assert_eq!((s.facts, s.features, s.supporting), (0, 2, 0));
    }

    #[test]
    fn prefixes_step_by_twenty_up_to_ten_rows() {
        assert_eq!(prefixes(60), [20, 40, 60]);
        assert_eq!(prefixes(50), [20, 40, 50]);
        assert_eq!(prefixes(419), [60, 120, 180, 240, 300, 360, 419]);
    }

    /// The real model on a paraphrase and an unrelated pair.
    #[test]
    fn the_local_model_tells_a_paraphrase_from_an_unrelated_feature() {
        let dir =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.tools/models/all-MiniLM-L6-v2");
        if !dir.join("config.json").is_file() {
            memmachine_testkit::cannot_run(
                "the fact-matching test with all-MiniLM-L6-v2",
                &format!("no model at {} (`memmachine model fetch`)", dir.display()),
            );
            return;
        }
        let model = Local::load(&dir).expect("the model loads");
        let facts = [fact(
            "Melanie painted a lake sunrise last year which holds special meaning to her.",
            &["D1:3"],
        )];
        let features = [
            feature(
                "painting: painted a sunrise over a lake last year",
                &["D1:3"],
            ),
            feature("career: plans to study counseling", &["D1:3"]),
        ];
        let s = score(&model, &facts, &features, &positions(10), &[10], T).expect("scores");
        assert!(s.best[0].matches, "paraphrase: {:?}", s.best[0]);
        assert!(!s.best[1].matches, "unrelated: {:?}", s.best[1]);
    }
}
