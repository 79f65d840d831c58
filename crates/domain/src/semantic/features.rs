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
    }
}
