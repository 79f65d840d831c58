//! What ranks a project's long-term memory: a ranking mode, or a reranker reordering the
//! default mode's candidates. Projects and the server's runtime settings name it in one
//! string (MemMachine's `reranker`), parsed into [`Ranking`] where it is read.

/// The ranking modes a project can name in `config.reranker`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Lexical,
    Dense,
    /// Both, fused; the default when an embedder is configured.
    Hybrid,
}

impl Mode {
    pub const NAMES: [&'static str; 3] = ["lexical", "dense", "hybrid"];

    pub fn name(self) -> &'static str {
        match self {
            Mode::Lexical => "lexical",
            Mode::Dense => "dense",
            Mode::Hybrid => "hybrid",
        }
    }

    /// The mode a project that names none ranks with.
    pub fn default_for(has_embedder: bool) -> Mode {
        if has_embedder {
            Mode::Hybrid
        } else {
            Mode::Lexical
        }
    }
}

/// A ranking choice, as a project or the server's default names it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Ranking {
    /// None named: hybrid with an embedder, else lexical.
    #[default]
    Default,
    Mode(Mode),
    /// A reranker, by name: it reorders the candidates of the default mode (one the
    /// server does not offer fails as a reranker does).
    Reranker(String),
}

impl Ranking {
    /// The choice a name gives: empty is the default, a mode's name that mode, any
    /// other a reranker's (checked against those offered where names are accepted).
    pub fn parse(name: &str) -> Ranking {
        match name {
            "" => Ranking::Default,
            "lexical" => Ranking::Mode(Mode::Lexical),
            "dense" => Ranking::Mode(Mode::Dense),
            "hybrid" => Ranking::Mode(Mode::Hybrid),
            reranker => Ranking::Reranker(reranker.to_string()),
        }
    }

    /// The name as projects and the settings API write it (empty for the default).
    pub fn name(&self) -> &str {
        match self {
            Ranking::Default => "",
            Ranking::Mode(mode) => mode.name(),
            Ranking::Reranker(name) => name,
        }
    }

    /// `self`, or `fallback` when it names none.
    pub fn or<'a>(&'a self, fallback: &'a Ranking) -> &'a Ranking {
        match self {
            Ranking::Default => fallback,
            named => named,
        }
    }

    /// The mode that ranks, and the reranker that reorders its candidates, if any.
    pub fn plan(&self, has_embedder: bool) -> (Mode, Option<&str>) {
        match self {
            Ranking::Default => (Mode::default_for(has_embedder), None),
            Ranking::Mode(mode) => (*mode, None),
            Ranking::Reranker(name) => (Mode::default_for(has_embedder), Some(name)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_into_choices_and_back() {
        for name in ["", "lexical", "dense", "hybrid", "cross-encoder"] {
            assert_eq!(Ranking::parse(name).name(), name);
        }
        assert_eq!(Ranking::parse("dense"), Ranking::Mode(Mode::Dense));
        let remote = Ranking::parse("remote");
        assert_eq!(remote.plan(true), (Mode::Hybrid, Some("remote")));
        assert_eq!(Ranking::Default.plan(false), (Mode::Lexical, None));
        assert_eq!(Ranking::Default.or(&remote), &remote);
        assert_eq!(Ranking::parse("lexical").or(&remote).name(), "lexical");
    }
}
