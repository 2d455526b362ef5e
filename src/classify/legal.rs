//! [`LegalExtractor`]: the acts, sections and jurisdictions (courts) a text refers to.
//!
//! The route of a legal query (`complex` when it names more than one act, more than two
//! sections or more than one jurisdiction) and the cache tags of a legal answer (so that an
//! amended act invalidates exactly the answers citing it) both come from here.

use std::collections::BTreeMap;

use regex::Regex;
use serde::{Deserialize, Serialize};

use super::lexicon;
use super::RuleConfig;
use crate::{Error, Result};

/// The references found in one text, each list normalized (lower-case, single spaces, a
/// leading "the" dropped), distinct, in order of first appearance.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LegalRefs {
    /// Acts, codes, statutes: `"companies act 2013"`, `"penal code"` (abbreviations such as
    /// `IPC` are expanded); an act with a year is listed once, with its year.
    pub acts: Vec<String>,
    /// Section numbers: `"420"`, `"12(1)"`.
    pub sections: Vec<String>,
    /// Jurisdictions and courts: `"delhi high court"`, `"bombay high court"` (two different
    /// high courts are two entries), `"california"`.
    pub jurisdictions: Vec<String>,
}

impl LegalRefs {
    /// Whether nothing was found.
    pub fn is_empty(&self) -> bool {
        self.acts.is_empty() && self.sections.is_empty() && self.jurisdictions.is_empty()
    }
}

/// Finds acts, sections and jurisdictions with the patterns of a [`RuleConfig`]
/// (`act_pattern`, `section_pattern`, `jurisdiction_patterns`, `act_abbreviations`).
///
/// ```
/// use rerank::classify::LegalExtractor;
/// let refs = LegalExtractor::default()
///     .extract("Do sections 3 and 4 of the Companies Act, 2013 bind the Delhi High Court and the Bombay High Court?");
/// assert_eq!(refs.acts, ["companies act 2013"]);
/// assert_eq!(refs.sections, ["3", "4"]);
/// assert_eq!(refs.jurisdictions, ["delhi high court", "bombay high court"]);
/// assert_eq!(LegalExtractor::act_tag("The Companies Act, 2013"), "act:companies act 2013");
/// ```
#[derive(Debug, Clone)]
pub struct LegalExtractor {
    act: Option<Regex>,
    section: Option<Regex>,
    jurisdictions: Vec<Regex>,
    abbreviations: Vec<(Regex, String)>,
    stopwords: Vec<String>,
}

impl Default for LegalExtractor {
    /// The English lexicon's patterns. They are known to compile (see the unit tests); should
    /// one ever fail, the extractor finds nothing for it rather than panicking.
    fn default() -> Self {
        Self::from_config(&RuleConfig::default()).unwrap_or_else(|_| LegalExtractor {
            act: None,
            section: None,
            jurisdictions: Vec::new(),
            abbreviations: Vec::new(),
            stopwords: Vec::new(),
        })
    }
}

impl LegalExtractor {
    /// An extractor with the patterns of `config`; fails when one does not compile.
    pub fn from_config(config: &RuleConfig) -> Result<Self> {
        let compile = |field: &str, p: &str| {
            Regex::new(p).map_err(|e| {
                Error::Config(format!(
                    "rule classifier: {field}: invalid pattern {p:?}: {e}"
                ))
            })
        };
        let act = Some(compile("act_pattern", &config.act_pattern)?);
        let section = Some(compile("section_pattern", &config.section_pattern)?);
        let jurisdictions = config
            .jurisdiction_patterns
            .iter()
            .map(|p| compile("jurisdiction_patterns", p))
            .collect::<Result<Vec<_>>>()?;
        let abbreviations = config
            .act_abbreviations
            .iter()
            .map(|(short, long)| {
                let p = format!(r"(?i)\b{}\b", regex::escape(short));
                Ok((compile("act_abbreviations", &p)?, normalize(long)))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(LegalExtractor {
            act,
            section,
            jurisdictions,
            abbreviations,
            stopwords: config.stopwords.iter().map(|s| s.to_lowercase()).collect(),
        })
    }

    /// The references in `text`.
    pub fn extract(&self, text: &str) -> LegalRefs {
        let mut refs = LegalRefs::default();
        let mut found: Vec<(usize, String)> = Vec::new();
        for c in self.act.iter().flat_map(|r| r.captures_iter(text)) {
            let Some(whole) = c.get(0) else { continue };
            let name = c.get(1).map_or("", |m| m.as_str()).to_lowercase();
            if self.stopwords.contains(&name) {
                continue;
            }
            found.push((whole.start(), normalize(whole.as_str())));
        }
        for (re, long) in &self.abbreviations {
            if let Some(m) = re.find(text) {
                found.push((m.start(), long.clone()));
            }
        }
        found.sort_by_key(|(at, _)| *at);
        for (_, act) in found {
            // "companies act" after "companies act 2013" (or before it) is the same act.
            let same = |a: &String| {
                a == &act || a.starts_with(&format!("{act} ")) || act.starts_with(&format!("{a} "))
            };
            match refs.acts.iter().position(same) {
                Some(i) if act.len() > refs.acts[i].len() => refs.acts[i] = act,
                Some(_) => {}
                None => refs.acts.push(act),
            }
        }
        for m in self.section.iter().flat_map(|r| r.find_iter(text)) {
            for n in section_numbers(m.as_str()) {
                push_distinct(&mut refs.sections, n);
            }
        }
        let places: Vec<(usize, usize, String)> = self
            .jurisdictions
            .iter()
            .flat_map(|r| {
                r.find_iter(text)
                    .map(|m| (m.start(), m.end(), normalize(m.as_str())))
            })
            .collect();
        // A place inside a longer match ("Delhi" in "Delhi High Court") is that match.
        let mut places: Vec<&(usize, usize, String)> = places
            .iter()
            .filter(|(s, e, _)| {
                !places
                    .iter()
                    .any(|(s2, e2, _)| s2 <= s && e <= e2 && (e2 - s2) > (e - s))
            })
            .collect();
        places.sort_by_key(|(at, _, _)| *at);
        for (_, _, p) in places {
            push_distinct(&mut refs.jurisdictions, p.clone());
        }
        refs
    }

    /// The cache tags for the acts in `refs`: `act:NAME` for each act, and for an act with a
    /// year also `act:NAME` without it, so invalidating "Companies Act" reaches every year.
    pub fn act_tags(refs: &LegalRefs) -> Vec<String> {
        let mut tags = Vec::new();
        for act in &refs.acts {
            push_distinct(&mut tags, format!("act:{act}"));
            if let Some((base, year)) = act.rsplit_once(' ') {
                if year.len() == 4 && year.chars().all(|c| c.is_ascii_digit()) {
                    push_distinct(&mut tags, format!("act:{base}"));
                }
            }
        }
        tags
    }

    /// The cache tag of one act name as a user writes it (`"The Companies Act, 2013"` ->
    /// `"act:companies act 2013"`).
    pub fn act_tag(name: &str) -> String {
        format!("act:{}", normalize(name))
    }
}

fn push_distinct(list: &mut Vec<String>, item: String) {
    if !item.is_empty() && !list.contains(&item) {
        list.push(item);
    }
}

/// Lower-case, punctuation other than parentheses and apostrophes dropped, "of" before a year
/// dropped, single spaces, a leading "the" dropped.
pub(super) fn normalize(text: &str) -> String {
    let lower = text.to_lowercase();
    let cleaned: String = lower
        .chars()
        .map(|c| {
            if c.is_alphanumeric() || "()'-".contains(c) {
                c
            } else {
                ' '
            }
        })
        .collect();
    let mut words: Vec<&str> = cleaned.split_whitespace().collect();
    while words.first() == Some(&"the") {
        words.remove(0);
    }
    let n = words.len();
    if n >= 2
        && words[n - 2] == "of"
        && words[n - 1].len() == 4
        && words[n - 1].chars().all(|c| c.is_ascii_digit())
    {
        words.remove(n - 2);
    }
    words.join(" ")
}

/// The section numbers inside one section-reference match (`"sections 3, 4 and 5"` -> 3, 4, 5).
pub(super) fn section_numbers(text: &str) -> Vec<String> {
    static NUMBER: std::sync::OnceLock<Option<Regex>> = std::sync::OnceLock::new();
    let Some(re) = NUMBER
        .get_or_init(|| Regex::new(r"(?i)\d+[a-z]?(?:\(\w+\))*").ok())
        .as_ref()
    else {
        return Vec::new();
    };
    re.find_iter(text)
        .map(|m| m.as_str().to_lowercase())
        .collect()
}

/// The default abbreviations: a few common short names of acts.
pub(super) fn default_abbreviations() -> BTreeMap<String, String> {
    lexicon::ACT_ABBREVIATIONS
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acts_sections_courts() {
        let x = LegalExtractor::default();
        let r = x.extract("IPC section 420 and the Companies Act; also the companies act 2013");
        assert_eq!(r.acts, ["penal code", "companies act 2013"]);
        assert_eq!(r.sections, ["420"]);
        let r = x.extract("the Delhi High Court and the Delhi High Court again");
        assert_eq!(r.jurisdictions, ["delhi high court"]);
        let r = x.extract("The High Court held");
        assert_eq!(r.jurisdictions, ["high court"]);
        assert!(x.extract("nothing legal here").is_empty());
    }

    #[test]
    fn act_tags_cover_the_year_and_the_name() {
        let refs = LegalRefs {
            acts: vec!["companies act 2013".into(), "penal code".into()],
            ..Default::default()
        };
        assert_eq!(
            LegalExtractor::act_tags(&refs),
            [
                "act:companies act 2013",
                "act:companies act",
                "act:penal code"
            ]
        );
        assert_eq!(
            LegalExtractor::act_tag("Companies Act of 2013"),
            "act:companies act 2013"
        );
    }
}
