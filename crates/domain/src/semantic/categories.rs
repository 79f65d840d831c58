//! The categories a set is distilled by: its own, then the templates of its set type
//! (an own category of the same name wins), then the defaults of its kind minus those
//! disabled for it. Each category has a prompt (what to extract) and tags.

use super::model::{Category, SetKind};

/// Name of the default category of user sets.
pub const PROFILE: &str = "profile";

const PROFILE_PROMPT: &str = "Extract durable facts about the user who wrote the messages: \
what they like and dislike, who they are, the people in their life, their work and skills, \
what they plan to do, their health, and how they like to be spoken to. Keep facts the user \
states or clearly implies about themselves; ignore passing remarks, questions, and what the \
assistant or others say, which are context only. One fact per feature, with a short feature \
name (\"favourite food\", \"daughter's name\") and a concise value.";

const PROFILE_TAGS: [(&str, &str); 7] = [
    ("preferences", "likes, dislikes, favourites and habits"),
    (
        "biography",
        "name, age, origin, where they live, education, life events",
    ),
    (
        "relationships",
        "family, partners, friends, pets and colleagues, with names",
    ),
    (
        "work and skills",
        "job, employer, projects, expertise, tools and languages",
    ),
    ("plans", "goals, upcoming events, intentions"),
    ("health", "conditions, diet, fitness, allergies"),
    (
        "communication style",
        "tone, language, level of detail they prefer",
    ),
];

/// One category as ingestion uses it.
#[derive(Debug, Clone, PartialEq)]
pub struct Effective {
    /// Its public id; empty for a built-in default.
    pub id: String,
    pub name: String,
    pub prompt: String,
    /// Names and descriptions; empty: the model may choose tags.
    pub tags: Vec<(String, String)>,
}

impl From<&Category> for Effective {
    fn from(category: &Category) -> Effective {
        Effective {
            id: category.id.clone(),
            name: category.name.clone(),
            prompt: category.prompt.clone(),
            tags: category
                .tags
                .iter()
                .map(|t| (t.name.clone(), t.description.clone()))
                .collect(),
        }
    }
}

/// The built-in categories of a set of this kind.
pub fn defaults(kind: SetKind) -> Vec<Effective> {
    match kind {
        SetKind::User => vec![Effective {
            id: String::new(),
            name: PROFILE.into(),
            prompt: PROFILE_PROMPT.into(),
            tags: PROFILE_TAGS
                .iter()
                .map(|(n, d)| (n.to_string(), d.to_string()))
                .collect(),
        }],
        SetKind::Org | SetKind::Project | SetKind::Custom => Vec::new(),
    }
}

/// The built-in category `name` of any kind of set, if there is one.
pub fn builtin(name: &str) -> Option<Effective> {
    defaults(SetKind::User)
        .into_iter()
        .find(|c| c.name.eq_ignore_ascii_case(name.trim()))
}

/// The categories of a set, in order: own, inherited templates, defaults not disabled.
pub fn resolve(
    own: &[Category],
    templates: &[Category],
    defaults: Vec<Effective>,
    disabled: &[String],
) -> Vec<Effective> {
    let mut out: Vec<Effective> = own.iter().map(Effective::from).collect();
    let taken =
        |out: &[Effective], name: &str| out.iter().any(|c| c.name.eq_ignore_ascii_case(name));
    for template in templates {
        if !taken(&out, &template.name) {
            out.push(template.into());
        }
    }
    for default in defaults {
        let off = disabled
            .iter()
            .any(|d| d.eq_ignore_ascii_case(&default.name));
        if !off && !taken(&out, &default.name) {
            out.push(default);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{CategoryId, SetId};
    use crate::semantic::model::CategoryOwner;

    fn category(name: &str, prompt: &str) -> Category {
        Category {
            internal_id: CategoryId::from_raw(1),
            id: format!("id-{name}"),
            owner: CategoryOwner::Set(SetId::from_raw(1)),
            name: name.into(),
            prompt: prompt.into(),
            description: String::new(),
            tags: Vec::new(),
        }
    }

    #[test]
    fn own_wins_over_template_and_default_and_disabled_defaults_go() {
        let own = [category("Profile", "mine")];
        let templates = [category("profile", "template"), category("travel", "t")];
        let resolved = resolve(&own, &templates, defaults(SetKind::User), &[]);
        let names: Vec<_> = resolved
            .iter()
            .map(|c| (c.name.as_str(), c.prompt.as_str()))
            .collect();
        assert_eq!(names, [("Profile", "mine"), ("travel", "t")]);
        let resolved = resolve(&[], &[], defaults(SetKind::User), &["PROFILE".into()]);
        assert!(resolved.is_empty());
        assert_eq!(resolve(&[], &[], defaults(SetKind::User), &[]).len(), 1);
        assert!(defaults(SetKind::Org).is_empty());
    }
}
