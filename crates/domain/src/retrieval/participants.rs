//! The names of a project's participants (the ids its episodes were produced by and
//! for), and a question with those names taken out. A bi-encoder weighs names heavily:
//! "What did Caroline say about the race?" resembles every turn Caroline said, whatever
//! it says, so the dense channel embeds the question without them (BM25 and filters
//! still see the whole question).

use std::collections::HashMap;

use super::tokenize::words;

#[derive(Debug, Default)]
pub struct Participants {
    /// By a name's lower-cased words joined by one space: the ids written so, each
    /// with the number of episodes naming it.
    names: HashMap<String, HashMap<Box<str>, u32>>,
    /// Most words in one name.
    longest: usize,
}

/// Longest name, in words, that is looked for in a question (longer ids are never
/// typed in questions, and the search costs this many lookups per word).
const MAX_NAME_WORDS: usize = 6;

/// What a question says of the participants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Named {
    /// The question without their names (`None` when nothing else is left).
    pub without: Option<String>,
    /// The ids it names, as episodes give them.
    pub ids: Vec<Box<str>>,
}

/// A name as a key of `names`, and its number of words.
fn key(name: &str) -> Option<(String, usize)> {
    let words: Vec<String> = words(name).collect();
    (!words.is_empty()).then(|| (words.join(" "), words.len()))
}

impl Participants {
    pub fn add(&mut self, id: &str) {
        if let Some((key, len)) = key(id).filter(|(_, len)| *len <= MAX_NAME_WORDS) {
            *self
                .names
                .entry(key)
                .or_default()
                .entry(id.into())
                .or_default() += 1;
            self.longest = self.longest.max(len);
        }
    }

    /// Every `(key, id, episodes)` held, and the most words in one name (for a segment).
    pub(crate) fn parts(&self) -> (Vec<(&str, &str, u32)>, usize) {
        let held = (self.names.iter())
            .flat_map(|(key, ids)| ids.iter().map(move |(id, n)| (key.as_str(), &**id, *n)))
            .collect();
        (held, self.longest)
    }

    /// Participants from `parts`.
    pub(crate) fn from_parts<'a>(
        held: impl Iterator<Item = (&'a str, &'a str, u32)>,
        longest: usize,
    ) -> Participants {
        let mut names: HashMap<String, HashMap<Box<str>, u32>> = HashMap::new();
        for (key, id, n) in held {
            names
                .entry(key.to_string())
                .or_default()
                .insert(id.into(), n);
        }
        Participants { names, longest }
    }

    /// Heap bytes held.
    pub fn heap_bytes(&self) -> usize {
        use super::heap;
        heap::map(&self.names)
            + self
                .names
                .iter()
                .map(|(key, ids)| {
                    heap::string(key)
                        + heap::map(ids)
                        + ids.keys().map(|id| heap::boxed_str(id)).sum::<usize>()
                })
                .sum::<usize>()
    }

    pub fn remove(&mut self, id: &str) {
        let Some((key, _)) = key(id) else {
            return;
        };
        let Some(ids) = self.names.get_mut(&key) else {
            return;
        };
        if let Some(count) = ids.get_mut(id) {
            *count -= 1;
            if *count == 0 {
                ids.remove(id);
            }
        }
        if ids.is_empty() {
            self.names.remove(&key);
        }
    }

    /// The participants `query` names (whole words, any case, with a possessive
    /// `'s`), and the query without them; `None` when it names none.
    pub fn named_in(&self, query: &str) -> Option<Named> {
        if self.names.is_empty() {
            return None;
        }
        let spans = word_spans(query);
        let lower: Vec<String> = spans
            .iter()
            .map(|&(s, e)| query[s..e].to_lowercase())
            .collect();
        let mut cut: Vec<(usize, usize)> = Vec::new();
        let mut ids: Vec<Box<str>> = Vec::new();
        let mut i = 0;
        while i < spans.len() {
            let longest = self.longest.min(spans.len() - i);
            let Some((n, named)) = (1..=longest)
                .rev()
                .find_map(|n| Some((n, self.names.get(&lower[i..i + n].join(" "))?)))
            else {
                i += 1;
                continue;
            };
            for id in named.keys() {
                if !ids.contains(id) {
                    ids.push(id.clone());
                }
            }
            let (start, mut end) = (spans[i].0, spans[i + n - 1].1);
            let mut next = i + n;
            // "Caroline's": the possessive goes with the name.
            if next < spans.len()
                && lower[next] == "s"
                && matches!(&query[end..spans[next].0], "'" | "\u{2019}")
            {
                end = spans[next].1;
                next += 1;
            }
            cut.push((start, end));
            i = next;
        }
        if cut.is_empty() {
            return None;
        }
        let mut kept = String::with_capacity(query.len());
        let mut from = 0;
        for (start, end) in cut {
            kept.push_str(&query[from..start]);
            from = end;
        }
        kept.push_str(&query[from..]);
        let kept = kept.split_whitespace().collect::<Vec<_>>().join(" ");
        let any_word = words(&kept).next().is_some();
        Some(Named {
            without: any_word.then_some(kept),
            ids,
        })
    }

    /// `query` without the participants' names, or `None` when it names none or is
    /// nothing but names.
    pub fn strip(&self, query: &str) -> Option<String> {
        self.named_in(query)?.without
    }
}

/// Byte ranges of the words of `text` (runs of letters and digits).
fn word_spans(text: &str) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut start = None;
    for (at, c) in text.char_indices() {
        match (c.is_alphanumeric(), start) {
            (true, None) => start = Some(at),
            (false, Some(s)) => {
                spans.push((s, at));
                start = None;
            }
            _ => {}
        }
    }
    if let Some(s) = start {
        spans.push((s, text.len()));
    }
    spans
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(names: &[&str]) -> Participants {
        let mut participants = Participants::default();
        names.iter().for_each(|n| participants.add(n));
        participants
    }

    #[test]
    fn names_go_whole_words_any_case_with_their_possessive() {
        let p = of(&["Caroline", "Melanie", "Jon Smith"]);
        assert_eq!(
            p.strip("What did Caroline say about Melanie's race?")
                .as_deref(),
            Some("What did say about race?")
        );
        assert_eq!(
            p.strip("when did jon smith and CAROLINE\u{2019}s dog meet")
                .as_deref(),
            Some("when did and dog meet")
        );
        // Part of a word, or one word of a longer name, is not the name.
        assert_eq!(p.strip("Carolines and Jon went"), None);
    }

    #[test]
    fn a_question_of_names_alone_or_naming_none_is_left_as_it_is() {
        let p = of(&["Caroline"]);
        assert_eq!(p.strip("Caroline?"), None);
        assert_eq!(p.strip("What happened at the race?"), None);
        assert_eq!(Participants::default().strip("Caroline went"), None);
    }

    #[test]
    fn a_name_is_forgotten_when_its_last_episode_goes() {
        let mut p = of(&["Caroline", "Caroline", "user-7"]);
        assert_eq!(p.strip("did user 7 go").as_deref(), Some("did go"));
        p.remove("Caroline");
        assert!(p.strip("Caroline went").is_some());
        p.remove("Caroline");
        assert_eq!(p.strip("Caroline went"), None);
        p.remove("nobody");
        p.add("");
        assert_eq!(p.strip("went"), None);
        // Ids of many words are not names anyone types.
        p.add("a b c d e f g");
        assert_eq!(p.strip("did a b c d e f g go"), None);
    }
}
