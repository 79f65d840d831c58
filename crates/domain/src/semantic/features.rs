//! How features are matched: a fact said again (same set, category, tag, feature name
//! and value, compared case-insensitively with spaces collapsed) is the same fact.

use super::model::NewFeature;

/// Separates the parts of a match key (the stores compare keys by prefix).
pub const KEY_SEPARATOR: char = '\u{1f}';

/// Lower case, trimmed, inner runs of white space as one space.
pub fn normalise(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

/// What tells two values apart when a model adds a fact it already holds under another
/// name: letters and digits only, lower case ("Denver, CO." and "denver co" are one).
pub fn value_words(value: &str) -> String {
    value
        .chars()
        .filter(|c| c.is_alphanumeric())
        .flat_map(char::to_lowercase)
        .collect()
}

/// Whether a value says something by itself, so that two features holding it are one
/// fact: not a bare yes or no, a flag or a short number ("likes cats: yes" and "likes
/// dogs: yes" are two facts).
pub fn telling_value(words: &str) -> bool {
    words.chars().count() >= 3
        && !matches!(
            words,
            "yes" | "no" | "true" | "false" | "none" | "null" | "unknown" | "maybe"
        )
        && !words.chars().all(|c| c.is_ascii_digit())
}

pub fn category_key(category: &str) -> String {
    normalise(category)
}

pub fn match_key(category: &str, tag: &str, feature: &str) -> String {
    format!(
        "{}{KEY_SEPARATOR}{}{KEY_SEPARATOR}{}",
        normalise(category),
        normalise(tag),
        normalise(feature)
    )
}

/// A feature to store, with a fresh id and its keys.
pub fn new_feature(
    category: &str,
    category_id: &str,
    tag: &str,
    feature: &str,
    value: &str,
    metadata: serde_json::Value,
) -> NewFeature {
    NewFeature {
        id: uuid::Uuid::new_v4().to_string(),
        category: category.trim().to_string(),
        category_id: category_id.to_string(),
        tag: tag.trim().to_string(),
        feature: feature.trim().to_string(),
        value: value.trim().to_string(),
        metadata,
        match_key: match_key(category, tag, feature),
        value_key: normalise(value),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_fact_said_differently_matches() {
        let a = new_feature(
            "Profile",
            "",
            "Preferences",
            "Favourite  food",
            "Pizza ",
            Default::default(),
        );
        let b = new_feature(
            "profile",
            "",
            "preferences",
            "favourite food",
            "pizza",
            Default::default(),
        );
        assert_eq!(
            (a.match_key, a.value_key),
            (b.match_key.clone(), b.value_key)
        );
        assert!(
            b.match_key
                .starts_with(&format!("{}{KEY_SEPARATOR}", category_key("PROFILE")))
        );
        assert_eq!(value_words("Denver, CO."), value_words("denver co"));
        assert_ne!(value_words("Denver"), value_words("Boulder"));
        assert!(telling_value(&value_words("Denver")));
        for bare in ["Yes.", "no", "TRUE", "42", "1990"] {
            assert!(!telling_value(&value_words(bare)), "{bare}");
        }
    }
}
