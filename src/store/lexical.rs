//! Turns a natural-language query into a lexical match expression: its words, lower
//! cased and de-duplicated, any of which may match (BM25 ranks documents matching more
//! and rarer words higher). Common English function words are dropped unless nothing
//! else is left, since they match nearly every document and only cost time.

/// Most terms kept from one query.
const MAX_TERMS: usize = 64;

const STOPWORDS: &[&str] = &[
    "a", "about", "after", "d", "ll", "m", "re", "s", "t", "ve", "all", "also", "am", "an", "and",
    "any", "are", "as", "at", "be", "been", "before", "being", "both", "but", "by", "can", "could",
    "did", "do", "does", "doing", "for", "from", "had", "has", "have", "having", "he", "her",
    "here", "hers", "him", "his", "how", "i", "if", "in", "into", "is", "it", "its", "just", "me",
    "my", "no", "nor", "not", "of", "off", "on", "or", "our", "ours", "she", "should", "so",
    "some", "such", "than", "that", "the", "their", "theirs", "them", "then", "there", "these",
    "they", "this", "those", "to", "too", "us", "very", "was", "we", "were", "what", "when",
    "where", "which", "while", "who", "whom", "why", "will", "with", "would", "you", "your",
    "yours",
];

/// The query's words, lower-cased, de-duplicated, stopwords removed when others remain.
pub fn terms(query: &str) -> Vec<String> {
    let mut words: Vec<String> = Vec::new();
    for word in query
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        let word = word.to_lowercase();
        if !words.contains(&word) {
            words.push(word);
        }
    }
    let content: Vec<String> = words
        .iter()
        .filter(|w| !STOPWORDS.contains(&w.as_str()))
        .cloned()
        .collect();
    let mut chosen = if content.is_empty() { words } else { content };
    chosen.truncate(MAX_TERMS);
    chosen
}

/// An FTS5 MATCH expression: every term quoted (so no word is read as an operator),
/// joined with OR. `None` when the query has no words.
pub fn match_query(query: &str) -> Option<String> {
    let terms = terms(query);
    (!terms.is_empty()).then(|| {
        terms
            .iter()
            .map(|t| format!("\"{t}\""))
            .collect::<Vec<_>>()
            .join(" OR ")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_content_words_and_drops_function_words() {
        assert_eq!(
            terms("What is the name of Caroline's dog?"),
            ["name", "caroline", "dog"]
        );
    }

    #[test]
    fn keeps_function_words_when_nothing_else_is_left() {
        assert_eq!(terms("who is he"), ["who", "is", "he"]);
    }

    #[test]
    fn quotes_terms_so_operators_and_punctuation_are_inert() {
        assert_eq!(
            match_query("NEAR OR \"x\" AND"),
            Some("\"near\" OR \"x\"".into())
        );
        assert_eq!(match_query("?!  ..."), None);
    }
}
