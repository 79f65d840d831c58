//! The kinds of call a load run makes and the weighted mix it draws them from
//! (`add=1,lexical=8,hybrid=1,list=1,delete=1`).

use std::fmt;

/// One kind of call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Add,
    Lexical,
    Hybrid,
    Dense,
    List,
    Delete,
}

impl Kind {
    pub const ALL: [Kind; 6] = [
        Kind::Add,
        Kind::Lexical,
        Kind::Hybrid,
        Kind::Dense,
        Kind::List,
        Kind::Delete,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Add => "add",
            Kind::Lexical => "lexical",
            Kind::Hybrid => "hybrid",
            Kind::Dense => "dense",
            Kind::List => "list",
            Kind::Delete => "delete",
        }
    }

    /// The ranking mode a search kind asks for (`ProjectConfig.reranker`).
    pub fn ranking(self) -> Option<&'static str> {
        match self {
            Kind::Lexical => Some("lexical"),
            Kind::Hybrid => Some("hybrid"),
            Kind::Dense => Some("dense"),
            _ => None,
        }
    }

    fn parse(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == name)
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Kinds with positive integer weights; a call is drawn with probability
/// weight / total.
#[derive(Debug, Clone, PartialEq)]
pub struct Mix {
    weights: Vec<(Kind, u32)>,
    total: u32,
}

impl Mix {
    /// Parses `kind=weight,...`; a kind without `=weight` weighs 1.
    pub fn parse(text: &str) -> Result<Mix, String> {
        let known = || {
            Kind::ALL
                .iter()
                .map(|k| k.name())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut weights: Vec<(Kind, u32)> = Vec::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, weight) = part.split_once('=').unwrap_or((part, "1"));
            let (name, weight) = (name.trim(), weight.trim());
            let kind = Kind::parse(name)
                .ok_or_else(|| format!("unknown call kind {name:?} (known: {})", known()))?;
            let weight: u32 = weight.parse().map_err(|_| {
                format!("the weight of {name} must be a whole number, got {weight:?}")
            })?;
            if weights.iter().any(|(k, _)| *k == kind) {
                return Err(format!("{name} is given twice"));
            }
            if weight > 0 {
                weights.push((kind, weight));
            }
        }
        if weights.is_empty() {
            return Err(format!(
                "no call kind with a positive weight in {text:?} (known: {})",
                known()
            ));
        }
        weights.sort();
        let total = weights
            .iter()
            .try_fold(0u32, |sum, (_, w)| sum.checked_add(*w))
            .ok_or("the weights add up to too much")?;
        Ok(Mix { weights, total })
    }

    /// The kind for a draw `r` (any number; reduced modulo the total weight).
    pub fn pick(&self, r: u64) -> Kind {
        let mut point = (r % u64::from(self.total)) as u32;
        for &(kind, weight) in &self.weights {
            if point < weight {
                return kind;
            }
            point -= weight;
        }
        unreachable!("the point is below the total weight")
    }

    pub fn contains(&self, kind: Kind) -> bool {
        self.weights.iter().any(|(k, _)| *k == kind)
    }

    /// The kinds in the mix, in `Kind` order, with their weights.
    pub fn weights(&self) -> &[(Kind, u32)] {
        &self.weights
    }

    /// The ranking modes searched, in `Kind` order.
    pub fn rankings(&self) -> Vec<&'static str> {
        self.weights
            .iter()
            .filter_map(|(k, _)| k.ranking())
            .collect()
    }
}

impl fmt::Display for Mix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .weights
            .iter()
            .map(|(k, w)| format!("{k}={w}"))
            .collect();
        f.write_str(&parts.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_weights_and_draws_in_proportion() {
        let mix = Mix::parse("add=1, lexical=8,hybrid=1,list,delete=0").expect("parses");
        assert_eq!(mix.to_string(), "add=1,lexical=8,hybrid=1,list=1");
        assert!(!mix.contains(Kind::Delete));
        assert_eq!(mix.rankings(), ["lexical", "hybrid"]);
        let mut counts = std::collections::HashMap::new();
        for r in 0..11u64 {
            *counts.entry(mix.pick(r)).or_insert(0) += 1;
        }
        assert_eq!(counts[&Kind::Lexical], 8);
        assert_eq!(counts[&Kind::Add], 1);
    }

    #[test]
    fn rejects_unknown_kinds_and_bad_weights() {
        let err = Mix::parse("lexical=1,fulltext=2").unwrap_err();
        assert!(err.contains("unknown call kind \"fulltext\""), "{err}");
        assert!(
            Mix::parse("lexical=x")
                .unwrap_err()
                .contains("whole number")
        );
        assert!(Mix::parse("lexical=0").unwrap_err().contains("positive"));
        assert!(Mix::parse("add,add").unwrap_err().contains("twice"));
    }
}
