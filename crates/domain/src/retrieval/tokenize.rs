//! Text analysis shared by indexing and querying (`bm25` indexes `stem(word)` for
//! every word): words are split on anything that is
//! not a letter or digit, lower-cased and stemmed (Snowball English), so "hiking" finds
//! "hikes". Queries also drop common English function words unless nothing else is
//! left, since they match nearly every document and only cost time.

use std::collections::HashSet;
use std::sync::LazyLock;

use rust_stemmers::{Algorithm, Stemmer};

/// Most terms kept from one query.
const MAX_QUERY_TERMS: usize = 64;

static STEMMER: LazyLock<Stemmer> = LazyLock::new(|| Stemmer::create(Algorithm::English));

const STOPWORDS: &[&str] = &[
    "a", "about", "after", "all", "also", "am", "an", "and", "any", "are", "as", "at", "be",
    "been", "before", "being", "both", "but", "by", "can", "could", "d", "did", "do", "does",
    "doing", "for", "from", "had", "has", "have", "having", "he", "her", "here", "hers", "him",
    "his", "how", "i", "if", "in", "into", "is", "it", "its", "just", "ll", "m", "me", "my", "no",
    "nor", "not", "of", "off", "on", "or", "our", "ours", "re", "s", "she", "should", "so", "some",
    "such", "t", "than", "that", "the", "their", "theirs", "them", "then", "there", "these",
    "they", "this", "those", "to", "too", "us", "ve", "very", "was", "we", "were", "what", "when",
    "where", "which", "while", "who", "whom", "why", "will", "with", "would", "you", "your",
    "yours",
];

/// The lower-cased words of `text`.
pub fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
}

/// Calls `each` with every lower-cased word of `text`, as `words` yields them, without
/// a string per word (indexing a large project otherwise allocates one per token).
pub fn for_each_word(text: &str, mut each: impl FnMut(&str)) {
    let mut buffer = String::new();
    for word in text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        if !word.is_ascii() {
            // Unicode lower-casing depends on context (a final sigma): as `words` does.
            each(&word.to_lowercase());
        } else if word.bytes().any(|b| b.is_ascii_uppercase()) {
            buffer.clear();
            buffer.push_str(word);
            buffer.make_ascii_lowercase();
            each(&buffer);
        } else {
            each(word);
        }
    }
}

/// The stem of a lower-cased word.
pub fn stem(word: &str) -> String {
    STEMMER.stem(word).into_owned()
}

/// The distinct terms of a query, stopwords removed when others remain. Linear in the
/// query's length, however many distinct words it holds.
pub fn query_terms(query: &str) -> Vec<String> {
    let mut seen = HashSet::new();
    let all: Vec<String> = words(query).filter(|w| seen.insert(w.clone())).collect();
    let content: Vec<&String> = all
        .iter()
        .filter(|w| !STOPWORDS.contains(&w.as_str()))
        .collect();
    let chosen: Vec<&String> = if content.is_empty() {
        all.iter().collect()
    } else {
        content
    };
    let mut stems = HashSet::new();
    chosen
        .into_iter()
        .map(|word| stem(word))
        .filter(|term| stems.insert(term.clone()))
        .take(MAX_QUERY_TERMS)
        .collect()
}

/// Whether `query` holds more than `max` distinct words (it stops counting there).
pub fn more_distinct_words_than(query: &str, max: usize) -> bool {
    let mut seen = HashSet::new();
    words(query)
        .filter(|w| seen.insert(w.clone()))
        .nth(max)
        .is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_content_words_and_drops_function_words() {
        assert_eq!(
            query_terms("What is the name of Caroline's dog?"),
            ["name", "carolin", "dog"]
        );
    }

    #[test]
    fn keeps_function_words_when_nothing_else_is_left() {
        assert_eq!(query_terms("who is he"), ["who", "is", "he"]);
    }

    #[test]
    fn stems_documents_and_queries_alike() {
        assert_eq!(
            words("Hiking, HIKES; hiked!")
                .map(|w| stem(&w))
                .collect::<Vec<_>>(),
            ["hike", "hike", "hike"]
        );
        assert_eq!(query_terms("hiking"), ["hike"]);
        assert!(query_terms("?!  ...").is_empty());
    }

    #[test]
    fn for_each_word_yields_what_words_yields() {
        let text = "Hiking, HIKES; hiked! ΣΊΣΥΦΟΣ Ünïcode x42 _-_ 3.14";
        let mut seen = Vec::new();
        for_each_word(text, |w| seen.push(w.to_string()));
        assert_eq!(seen, words(text).collect::<Vec<_>>());
    }
}
