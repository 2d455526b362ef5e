//! [`RuleClassifier`]: a fast, transparent, configurable rule-based [`QueryClassifier`].

use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use regex::Regex;
use serde::{Deserialize, Serialize};

use super::legal::{LegalExtractor, LegalRefs};
use super::lexicon;
use super::{Classification, Intent, QueryClassifier, QueryKind, Route, TaskType};
use crate::text::{contains_phrase, is_form_of, phrase_words, words, Word};
use crate::text::{Analyzer, EnglishAnalyzer};
use crate::{Error, Result};

/// Confidence when a pattern decided.
const PATTERN: f32 = 1.0;
/// Confidence when heuristics decided.
const HEURISTIC: f32 = 0.7;
/// Confidence of a default.
const DEFAULT: f32 = 0.5;

/// Everything [`RuleClassifier`] uses, as data: word lists, patterns and thresholds.
///
/// [`RuleConfig::default`] holds the English defaults from [`lexicon`](super::lexicon). Any
/// field can be replaced; missing fields in a JSON/YAML/TOML config take their defaults.
/// Word lists are compared lower-cased; regular expressions use the `regex` crate syntax
/// (add `(?i)` for case-insensitive matching).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RuleConfig {
    /// Known people: alias -> canonical name (`{"tay": "Taylor Smith"}`). Aliases, canonical
    /// names and each word of a canonical name count as known names.
    pub aliases: BTreeMap<String, String>,
    /// Identifier keywords (passport, ktn, ssn, phone, ...).
    pub identifier_keywords: Vec<String>,
    /// Action verbs that signal a semantic query (inflections match too).
    pub action_verbs: Vec<String>,
    /// Discovery words that signal a semantic query (inflections and singulars match too).
    pub discovery_words: Vec<String>,
    /// A query of at most this many words is short (default 5).
    pub short_query_words: usize,
    /// A query of more than this many words is long, a semantic signal (default 8).
    pub long_query_words: usize,
    /// How many words after a possessive may hold the identifier keyword (default 3:
    /// "Alex's mobile phone number").
    pub possessive_window: usize,
    /// Greetings, thanks, farewells, small talk (phrases of one or more words).
    pub chitchat_phrases: Vec<String>,
    /// Words allowed around chitchat phrases ("thanks **a lot**").
    pub chitchat_fillers: Vec<String>,
    /// Words that are never searchable on their own (pronouns, function words).
    pub stopwords: Vec<String>,
    /// Regular expressions for references to an earlier turn.
    pub back_reference_patterns: Vec<String>,
    /// The host's domain vocabulary. When non-empty, a query sharing no content word with it
    /// (after stemming) is off-topic. See also [`RuleClassifierBuilder::domain_corpus`].
    pub domain_vocabulary: Vec<String>,
    /// Regular expressions for the `simple` route.
    pub simple_patterns: Vec<String>,
    /// Regular expressions for the `analytical` route.
    pub analytical_patterns: Vec<String>,
    /// A regular expression for one act or statute reference; capture group 1 (when present)
    /// names the act.
    pub act_pattern: String,
    /// A regular expression for section references; each number inside a match counts.
    pub section_pattern: String,
    /// Regular expressions for jurisdictions and courts.
    pub jurisdiction_patterns: Vec<String>,
    /// Short names of acts -> the name the act pattern gives them (`{"IPC": "penal code"}`),
    /// matched as whole words, case-insensitively (default: a few common ones).
    pub act_abbreviations: BTreeMap<String, String>,
    /// Words and phrases for the `implementation` task type.
    pub implementation_words: Vec<String>,
    /// Words and phrases for the `troubleshooting` task type.
    pub troubleshooting_words: Vec<String>,
    /// Words and phrases for the `design` task type.
    pub design_words: Vec<String>,
}

fn owned(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

impl Default for RuleConfig {
    fn default() -> Self {
        RuleConfig {
            aliases: BTreeMap::new(),
            identifier_keywords: owned(lexicon::IDENTIFIER_KEYWORDS),
            action_verbs: owned(lexicon::ACTION_VERBS),
            discovery_words: owned(lexicon::DISCOVERY_WORDS),
            short_query_words: 5,
            long_query_words: 8,
            possessive_window: 3,
            chitchat_phrases: owned(lexicon::CHITCHAT_PHRASES),
            chitchat_fillers: owned(lexicon::CHITCHAT_FILLERS),
            stopwords: owned(crate::text::QUERY_STOPWORDS),
            back_reference_patterns: owned(lexicon::BACK_REFERENCE_PATTERNS),
            domain_vocabulary: Vec::new(),
            simple_patterns: owned(lexicon::SIMPLE_PATTERNS),
            analytical_patterns: owned(lexicon::ANALYTICAL_PATTERNS),
            act_pattern: lexicon::ACT_PATTERN.to_string(),
            section_pattern: lexicon::SECTION_PATTERN.to_string(),
            jurisdiction_patterns: owned(lexicon::JURISDICTION_PATTERNS),
            act_abbreviations: super::legal::default_abbreviations(),
            implementation_words: owned(lexicon::IMPLEMENTATION_WORDS),
            troubleshooting_words: owned(lexicon::TROUBLESHOOTING_WORDS),
            design_words: owned(lexicon::DESIGN_WORDS),
        }
    }
}

/// Reads an aliases file: a JSON object `{"alias": "Canonical Name", ...}`.
pub fn read_aliases(path: impl AsRef<Path>) -> Result<BTreeMap<String, String>> {
    let path = path.as_ref();
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    serde_json::from_str(&text).map_err(|e| {
        Error::parse(
            format!("aliases file {}", path.display()),
            format!("{e}; expected a JSON object {{\"alias\": \"Canonical Name\", ...}}"),
        )
    })
}

/// A rule-based [`QueryClassifier`]: no model, microseconds per query, and every decision
/// explained by the [`Classification::signals`] that fired.
///
/// **Kind.** Factual signals: a possessive followed by an identifier keyword
/// (`possessive_identifier`, a pattern), "what is X's ..." (`what_is_possessive`, a pattern),
/// a numbered section ("section 420", "s. 5(2)", "§ 7": `section_reference:N`, a pattern, since
/// the query asks for that provision), a known name (`known_name:NAME`), an identifier keyword
/// in a short query (`identifier_keyword:WORD`), a short query with a known name
/// (`short_known_name`). Semantic signals: action verbs (`action_verb:WORD`), discovery words
/// (`discovery_word:WORD`), a long query (`long_query`). Patterns weigh 2, heuristics 1; the
/// heavier side wins, a tie goes to factual for short queries and semantic otherwise; with no
/// signal, short queries default to factual (`default_factual`) and others to semantic
/// (`default_semantic`).
///
/// **Intent.** `chitchat` when the query is only greetings, thanks, farewells or small talk;
/// `clarification` when nothing searchable is left (`nothing_searchable`) or the query refers
/// back to an earlier turn that was not given (`back_reference`); `off_topic` when a domain
/// vocabulary is set and no content word matches it; else `knowledge_search`.
///
/// **Route.** `analytical` (comparison, evolution, "all grounds", ...) before `complex` (more
/// than one act, more than two sections, more than one jurisdiction or court) before `simple`
/// ("define X", "what does section N say", ...); else `standard`.
///
/// **Task type.** The category with the most matching words (troubleshooting, then design, then
/// implementation on ties); `general` when none matches. Words inside a name do not count: a
/// run of two or more capitalized words, possibly joined by lower-case "of", "the", "and",
/// "for" (the "Code" of "Penal Code", "Labour Code", "Code of Civil Procedure"). The first
/// word of a sentence starts no name when it is itself a task-type word ("Install Redis",
/// "Write Python code"), unless a joining word follows it ("Code of Civil Procedure").
///
/// **Confidence.** For chitchat and back-references 1.0; for the nothing-searchable heuristic
/// 0.7; otherwise that of the kind decision: 1.0 when a pattern signal was on the winning side,
/// 0.7 for heuristics only, 0.5 for a default.
///
/// ```
/// use rerank::classify::RuleClassifier;
/// use rerank::QueryClassifier;
/// use rerank::classify::{QueryKind, Intent};
///
/// let classifier = RuleClassifier::builder().alias("Tay", "Taylor Smith").build()?;
/// let c = classifier.classify("Taylor's KTN");
/// assert_eq!(c.kind, QueryKind::Factual);
/// assert_eq!(c.confidence, 1.0);
/// assert!(c.signals.contains(&"possessive_identifier".to_string()));
/// assert_eq!(classifier.classify("summarize my notes about the project").kind, QueryKind::Semantic);
/// assert_eq!(classifier.classify("good morning").intent, Intent::Chitchat);
/// # Ok::<(), rerank::Error>(())
/// ```
pub struct RuleClassifier {
    config: RuleConfig,
    known_names: Vec<(Vec<String>, String)>,
    identifiers: Vec<String>,
    action_verbs: Vec<String>,
    discovery_words: Vec<String>,
    chitchat: Vec<Vec<String>>,
    fillers: HashSet<String>,
    stopwords: HashSet<String>,
    back_references: Vec<Regex>,
    domain_terms: HashSet<String>,
    stemmer: EnglishAnalyzer,
    simple: Vec<Regex>,
    analytical: Vec<Regex>,
    legal: LegalExtractor,
    implementation: Vec<Vec<String>>,
    troubleshooting: Vec<Vec<String>>,
    design: Vec<Vec<String>>,
}

impl std::fmt::Debug for RuleClassifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuleClassifier")
            .field("aliases", &self.config.aliases.len())
            .field("identifier_keywords", &self.identifiers.len())
            .field("domain_terms", &self.domain_terms.len())
            .finish_non_exhaustive()
    }
}

impl Default for RuleClassifier {
    /// The English defaults, with no aliases and no domain vocabulary.
    fn default() -> Self {
        // The default patterns are known to compile (see the unit tests); should one ever fail,
        // it is left out rather than panicking.
        compile(RuleConfig::default(), HashSet::new()).0
    }
}

impl RuleClassifier {
    /// A classifier from a config; fails when a pattern does not compile or a threshold is 0.
    pub fn new(config: RuleConfig) -> Result<Self> {
        RuleClassifierBuilder::from_config(config).build()
    }

    /// A builder starting from the English defaults.
    pub fn builder() -> RuleClassifierBuilder {
        RuleClassifierBuilder::default()
    }

    /// The configuration in use.
    pub fn config(&self) -> &RuleConfig {
        &self.config
    }

    /// Classifies a query that is part of a conversation. With a non-empty `history` (earlier
    /// turns, oldest first), back-references and queries with nothing searchable left are
    /// follow-ups (`knowledge_search` with the `follow_up` signal) rather than clarifications.
    pub fn classify_with_history(&self, query: &str, history: &[&str]) -> Classification {
        self.run(query, history.iter().any(|t| !t.trim().is_empty()))
    }

    /// The acts, sections and jurisdictions `text` refers to (the extractor the route uses).
    pub fn legal_refs(&self, text: &str) -> LegalRefs {
        self.legal.extract(text)
    }

    /// The extractor of acts, sections and jurisdictions built from this config.
    pub fn legal_extractor(&self) -> &LegalExtractor {
        &self.legal
    }

    /// The canonical names of the known people `query` mentions (aliases resolved), in the
    /// order of the alias map, without duplicates.
    pub fn known_names(&self, query: &str) -> Vec<String> {
        let ws: Vec<String> = words(query).into_iter().map(|w| w.text).collect();
        let mut out: Vec<String> = Vec::new();
        for (phrase, canonical) in &self.known_names {
            if contains_phrase(&ws, phrase) && !out.contains(canonical) {
                out.push(canonical.clone());
            }
        }
        out
    }

    fn run(&self, query: &str, has_history: bool) -> Classification {
        let ws = words(query);
        let plain: Vec<String> = ws.iter().map(|w| w.text.clone()).collect();
        let refs = self.legal.extract(query);
        let mut signals = Vec::new();

        let (intent, intent_confidence) = self.intent(query, &plain, has_history, &mut signals);
        let (kind, kind_confidence) = self.kind(&ws, &plain, &refs, &mut signals);
        let (route, route_confidence, legal) = self.route(query, refs, &mut signals);
        let task_type = self.task_type(&ws, &plain, &mut signals);

        Classification {
            kind,
            intent,
            route,
            task_type,
            confidence: intent_confidence.unwrap_or(kind_confidence),
            kind_confidence,
            route_confidence,
            signals,
            legal,
            people: self.known_names(query),
        }
    }

    fn intent(
        &self,
        query: &str,
        plain: &[String],
        has_history: bool,
        signals: &mut Vec<String>,
    ) -> (Intent, Option<f32>) {
        if self.is_chitchat(plain) {
            signals.push("chitchat".into());
            return (Intent::Chitchat, Some(PATTERN));
        }
        let back_reference = self.back_references.iter().any(|r| r.is_match(query));
        let content: Vec<&String> = plain
            .iter()
            .filter(|w| !self.stopwords.contains(w.as_str()))
            .filter(|w| !self.action_verbs.iter().any(|v| is_form_of(w, v)))
            .collect();
        if back_reference || content.is_empty() {
            if has_history {
                signals.push("follow_up".into());
                return (Intent::KnowledgeSearch, None);
            }
            if back_reference {
                signals.push("back_reference".into());
                return (Intent::Clarification, Some(PATTERN));
            }
            signals.push("nothing_searchable".into());
            return (Intent::Clarification, Some(HEURISTIC));
        }
        if !self.domain_terms.is_empty() {
            let topical = content
                .iter()
                .filter(|w| !self.discovery_words.iter().any(|d| is_form_of(w, d)))
                .flat_map(|w| self.stemmer.analyze(w))
                .any(|t| self.domain_terms.contains(&t));
            if !topical {
                signals.push("off_topic".into());
                return (Intent::OffTopic, None);
            }
        }
        (Intent::KnowledgeSearch, None)
    }

    /// Only chitchat phrases and fillers, and at least one phrase.
    fn is_chitchat(&self, plain: &[String]) -> bool {
        let mut i = 0;
        let mut phrases = 0;
        'outer: while i < plain.len() {
            for phrase in &self.chitchat {
                if plain[i..].starts_with(phrase) {
                    i += phrase.len();
                    phrases += 1;
                    continue 'outer;
                }
            }
            if self.fillers.contains(&plain[i]) {
                i += 1;
                continue;
            }
            return false;
        }
        phrases > 0
    }

    fn kind(
        &self,
        ws: &[Word],
        plain: &[String],
        refs: &LegalRefs,
        signals: &mut Vec<String>,
    ) -> (QueryKind, f32) {
        let n = plain.len();
        let short = n <= self.config.short_query_words;
        let is_identifier = |w: &str| self.identifiers.iter().any(|k| is_form_of(w, k));
        let (mut factual, mut semantic) = (0u32, 0u32);
        let (mut factual_pattern, semantic_pattern) = (false, false);

        let window = self.config.possessive_window;
        let possessive_identifier = ws.iter().enumerate().any(|(i, w)| {
            w.possessive
                && ws[i + 1..]
                    .iter()
                    .take(window)
                    .any(|next| is_identifier(&next.text))
        });
        if possessive_identifier {
            signals.push("possessive_identifier".into());
            factual += 2;
            factual_pattern = true;
        }
        let what_is_possessive = plain.first().is_some_and(|w| w == "what")
            && (ws.get(1).is_some_and(|w| w.possessive)
                || (ws
                    .get(1)
                    .is_some_and(|w| matches!(w.text.as_str(), "is" | "are" | "was"))
                    && ws.get(2).is_some_and(|w| w.possessive)));
        if what_is_possessive {
            signals.push("what_is_possessive".into());
            factual += 2;
            factual_pattern = true;
        }
        // A numbered section asks for that provision: its exact match matters.
        if !refs.sections.is_empty() {
            signals.extend(
                refs.sections
                    .iter()
                    .map(|n| format!("section_reference:{n}")),
            );
            factual += 2;
            factual_pattern = true;
        }
        let names: Vec<&Vec<String>> = self
            .known_names
            .iter()
            .map(|(phrase, _)| phrase)
            .filter(|phrase| contains_phrase(plain, phrase))
            .collect();
        // "Taylor's ...": a known person's possessive asks for something of theirs, whatever
        // else the query says.
        let known_possessive = self.known_names.iter().any(|(phrase, _)| {
            !phrase.is_empty()
                && (0..plain.len())
                    .any(|i| plain[i..].starts_with(phrase) && ws[i + phrase.len() - 1].possessive)
        });
        if known_possessive {
            signals.push("known_name_possessive".into());
        }
        if !names.is_empty() {
            let mut seen = HashSet::new();
            for name in &names {
                let name = name.join(" ");
                if seen.insert(name.clone()) {
                    signals.push(format!("known_name:{name}"));
                }
            }
            factual += 1;
        }
        if short {
            if let Some(k) = plain.iter().find(|w| is_identifier(w)) {
                signals.push(format!("identifier_keyword:{k}"));
                factual += 1;
            }
            if !names.is_empty() {
                signals.push("short_known_name".into());
                factual += 1;
            }
        }

        let verbs: Vec<&String> = plain
            .iter()
            .filter(|w| self.action_verbs.iter().any(|v| is_form_of(w, v)))
            .collect();
        if !verbs.is_empty() {
            signals.extend(verbs.iter().map(|v| format!("action_verb:{v}")));
            semantic += 1;
        }
        let discovery: Vec<&String> = plain
            .iter()
            .filter(|w| self.discovery_words.iter().any(|d| is_form_of(w, d)))
            .collect();
        if !discovery.is_empty() {
            signals.extend(discovery.iter().map(|d| format!("discovery_word:{d}")));
            semantic += 1;
        }
        if n > self.config.long_query_words {
            signals.push("long_query".into());
            semantic += 1;
        }

        if known_possessive {
            return (QueryKind::Factual, PATTERN);
        }
        if factual == 0 && semantic == 0 {
            return if short {
                signals.push("default_factual".into());
                (QueryKind::Factual, DEFAULT)
            } else {
                signals.push("default_semantic".into());
                (QueryKind::Semantic, DEFAULT)
            };
        }
        let is_factual = factual > semantic || (factual == semantic && short);
        let confidence = |pattern: bool| if pattern { PATTERN } else { HEURISTIC };
        if is_factual {
            (QueryKind::Factual, confidence(factual_pattern))
        } else {
            (QueryKind::Semantic, confidence(semantic_pattern))
        }
    }

    fn route(
        &self,
        query: &str,
        refs: LegalRefs,
        signals: &mut Vec<String>,
    ) -> (Route, f32, LegalRefs) {
        let mut analytical = false;
        for r in &self.analytical {
            if let Some(m) = r.find(query) {
                signals.push(format!("analytical:{}", m.as_str().to_lowercase()));
                analytical = true;
            }
        }

        let mut complex = false;
        if refs.acts.len() > 1 {
            signals.push("multiple_acts".into());
            complex = true;
        }
        if refs.sections.len() > 2 {
            signals.push("multiple_sections".into());
            complex = true;
        }
        if refs.jurisdictions.len() > 1 {
            signals.push("multiple_jurisdictions".into());
            complex = true;
        }

        let mut simple = false;
        for r in &self.simple {
            if let Some(m) = r.find(query) {
                signals.push(format!("simple:{}", m.as_str().trim().to_lowercase()));
                simple = true;
            }
        }

        // A route pattern decides with confidence 1.0; counted references are a heuristic
        // (0.7); the default route has 0.5.
        if analytical {
            (Route::Analytical, PATTERN, refs)
        } else if complex {
            (Route::Complex, HEURISTIC, refs)
        } else if simple {
            (Route::Simple, PATTERN, refs)
        } else {
            (Route::Standard, DEFAULT, refs)
        }
    }

    fn task_type(&self, ws: &[Word], plain: &[String], signals: &mut Vec<String>) -> TaskType {
        let in_name = self.names(ws);
        let mut best = (0usize, TaskType::General);
        // Tie order: troubleshooting, design, implementation (the first to reach a count wins).
        for (task, name, phrases) in [
            (
                TaskType::Troubleshooting,
                "troubleshooting",
                &self.troubleshooting,
            ),
            (TaskType::Design, "design", &self.design),
            (
                TaskType::Implementation,
                "implementation",
                &self.implementation,
            ),
        ] {
            let hits: Vec<&Vec<String>> = phrases
                .iter()
                .filter(|p| contains_phrase_outside(plain, &in_name, p))
                .collect();
            for p in &hits {
                signals.push(format!("{name}:{}", p.join(" ")));
            }
            if hits.len() > best.0 {
                best = (hits.len(), task);
            }
        }
        best.1
    }

    /// Which words are inside a name: a run of two or more capitalized words, possibly joined
    /// by [`NAME_JOINERS`], within one sentence. A sentence's first word that is a task-type
    /// word starts no name unless a joiner follows it ("Install Redis", but "Code of Civil
    /// Procedure").
    fn names(&self, ws: &[Word]) -> Vec<bool> {
        let joiner = |w: &Word| !w.capitalized && NAME_JOINERS.contains(&w.text.as_str());
        let task_word = |w: &Word| {
            [&self.implementation, &self.troubleshooting, &self.design]
                .iter()
                .any(|list| list.iter().any(|p| p.first() == Some(&w.text)))
        };
        let mut in_name = vec![false; ws.len()];
        let mut i = 0;
        while i < ws.len() {
            let w = &ws[i];
            let starts = w.capitalized
                && !(w.sentence_start && task_word(w) && !ws.get(i + 1).is_some_and(joiner));
            if !starts {
                i += 1;
                continue;
            }
            // Extend over joiners to the next capitalized word of the same sentence.
            let (mut end, mut capitals) = (i + 1, 1);
            // A possessive ends a name ("Taylor's API key" is not one).
            while !ws[end - 1].possessive {
                let mut k = end;
                while ws.get(k).is_some_and(|w| joiner(w) && !w.sentence_start) {
                    k += 1;
                }
                match ws.get(k) {
                    Some(next) if next.capitalized && !next.sentence_start => {
                        capitals += 1;
                        end = k + 1;
                    }
                    _ => break,
                }
            }
            if capitals >= 2 {
                in_name[i..end].iter_mut().for_each(|x| *x = true);
            }
            i = end;
        }
        in_name
    }
}

/// Lower-case words that may join the capitalized words of a name ("Code of Civil Procedure",
/// "Bank of the West").
const NAME_JOINERS: &[&str] = &[
    "of", "the", "and", "for", "on", "de", "du", "des", "la", "le",
];

/// Whether `phrase` occurs in `words` with none of its words inside a name.
fn contains_phrase_outside(words: &[String], in_name: &[bool], phrase: &[String]) -> bool {
    !phrase.is_empty()
        && words
            .windows(phrase.len())
            .zip(in_name.windows(phrase.len()))
            .any(|(w, named)| w == phrase && !named.iter().any(|&x| x))
}

impl QueryClassifier for RuleClassifier {
    fn classify(&self, query: &str) -> Classification {
        self.run(query, false)
    }
}

/// Builds a [`RuleClassifier`]; [`RuleClassifierBuilder::build`] checks every pattern.
#[derive(Debug, Clone, Default)]
pub struct RuleClassifierBuilder {
    config: RuleConfig,
    domain_terms: HashSet<String>,
}

impl RuleClassifierBuilder {
    /// A builder starting from `config`.
    pub fn from_config(config: RuleConfig) -> Self {
        RuleClassifierBuilder {
            config,
            domain_terms: HashSet::new(),
        }
    }

    /// Replaces the alias map (alias -> canonical name).
    pub fn aliases(mut self, aliases: BTreeMap<String, String>) -> Self {
        self.config.aliases = aliases;
        self
    }

    /// Adds one alias.
    pub fn alias(mut self, alias: impl Into<String>, canonical: impl Into<String>) -> Self {
        self.config.aliases.insert(alias.into(), canonical.into());
        self
    }

    /// Replaces the identifier keywords.
    pub fn identifier_keywords<S: Into<String>>(
        mut self,
        keywords: impl IntoIterator<Item = S>,
    ) -> Self {
        self.config.identifier_keywords = keywords.into_iter().map(Into::into).collect();
        self
    }

    /// Adds identifier keywords to the current ones.
    pub fn add_identifier_keywords<S: Into<String>>(
        mut self,
        keywords: impl IntoIterator<Item = S>,
    ) -> Self {
        self.config
            .identifier_keywords
            .extend(keywords.into_iter().map(Into::into));
        self
    }

    /// Replaces the action verbs.
    pub fn action_verbs<S: Into<String>>(mut self, verbs: impl IntoIterator<Item = S>) -> Self {
        self.config.action_verbs = verbs.into_iter().map(Into::into).collect();
        self
    }

    /// Replaces the discovery words.
    pub fn discovery_words<S: Into<String>>(mut self, words: impl IntoIterator<Item = S>) -> Self {
        self.config.discovery_words = words.into_iter().map(Into::into).collect();
        self
    }

    /// Adds domain vocabulary words (enables off-topic detection).
    pub fn domain_vocabulary<S: Into<String>>(
        mut self,
        words: impl IntoIterator<Item = S>,
    ) -> Self {
        self.config
            .domain_vocabulary
            .extend(words.into_iter().map(Into::into));
        self
    }

    /// Adds every content word of `texts` (e.g. the indexed documents) to the domain
    /// vocabulary (enables off-topic detection). The terms are kept stemmed, not as a list in
    /// the config.
    pub fn domain_corpus<'a>(mut self, texts: impl IntoIterator<Item = &'a str>) -> Self {
        let stemmer = stemmer();
        for text in texts {
            self.domain_terms.extend(stemmer.analyze(text));
        }
        self
    }

    /// Replaces the act or statute pattern (capture group 1 names the act).
    pub fn act_pattern(mut self, pattern: impl Into<String>) -> Self {
        self.config.act_pattern = pattern.into();
        self
    }

    /// Replaces the section-reference pattern.
    pub fn section_pattern(mut self, pattern: impl Into<String>) -> Self {
        self.config.section_pattern = pattern.into();
        self
    }

    /// Replaces the jurisdiction and court patterns.
    pub fn jurisdiction_patterns<S: Into<String>>(
        mut self,
        patterns: impl IntoIterator<Item = S>,
    ) -> Self {
        self.config.jurisdiction_patterns = patterns.into_iter().map(Into::into).collect();
        self
    }

    /// Sets the short-query limit (at most this many words; default 5).
    pub fn short_query_words(mut self, n: usize) -> Self {
        self.config.short_query_words = n;
        self
    }

    /// Sets the long-query limit (more than this many words; default 8).
    pub fn long_query_words(mut self, n: usize) -> Self {
        self.config.long_query_words = n;
        self
    }

    /// Gives access to the whole config for anything else.
    pub fn config_mut(&mut self) -> &mut RuleConfig {
        &mut self.config
    }

    /// Checks the thresholds and compiles every pattern.
    pub fn build(self) -> Result<RuleClassifier> {
        let c = &self.config;
        if c.short_query_words == 0 {
            return Err(Error::Config(
                "rule classifier: short_query_words must be at least 1".into(),
            ));
        }
        if c.long_query_words < c.short_query_words {
            return Err(Error::Config(format!(
                "rule classifier: long_query_words ({}) must be at least short_query_words ({})",
                c.long_query_words, c.short_query_words
            )));
        }
        let (classifier, errors) = compile(self.config, self.domain_terms);
        match errors.is_empty() {
            true => Ok(classifier),
            false => Err(Error::Config(format!(
                "rule classifier: {}",
                errors.join("; ")
            ))),
        }
    }
}

fn stemmer() -> EnglishAnalyzer {
    EnglishAnalyzer::new(std::iter::empty(), true)
}

/// Compiles a config; patterns that fail are left out and reported.
fn compile(config: RuleConfig, mut domain_terms: HashSet<String>) -> (RuleClassifier, Vec<String>) {
    let mut errors = Vec::new();
    let mut regexes = |field: &str, patterns: &[String]| -> Vec<Regex> {
        patterns
            .iter()
            .filter_map(|p| match Regex::new(p) {
                Ok(r) => Some(r),
                Err(e) => {
                    errors.push(format!("{field}: invalid pattern {p:?}: {e}"));
                    None
                }
            })
            .collect()
    };
    let back_references = regexes("back_reference_patterns", &config.back_reference_patterns);
    let simple = regexes("simple_patterns", &config.simple_patterns);
    let analytical = regexes("analytical_patterns", &config.analytical_patterns);
    regexes("jurisdiction_patterns", &config.jurisdiction_patterns);
    regexes("act_pattern", std::slice::from_ref(&config.act_pattern));
    regexes(
        "section_pattern",
        std::slice::from_ref(&config.section_pattern),
    );
    // The patterns' errors are reported above; a failed extractor finds nothing.
    let legal = LegalExtractor::from_config(&config).unwrap_or_default();

    let mut known_names: Vec<(Vec<String>, String)> = Vec::new();
    for (alias, canonical) in &config.aliases {
        known_names.push((phrase_words(alias), canonical.clone()));
        known_names.push((phrase_words(canonical), canonical.clone()));
        for part in phrase_words(canonical) {
            if part.chars().count() > 1 {
                known_names.push((vec![part], canonical.clone()));
            }
        }
    }
    known_names.retain(|(phrase, _)| !phrase.is_empty());
    known_names.dedup();

    let lower = |list: &[String]| -> Vec<String> {
        list.iter()
            .map(|w| w.trim().to_lowercase())
            .filter(|w| !w.is_empty())
            .collect()
    };
    let phrases = |list: &[String]| -> Vec<Vec<String>> {
        list.iter()
            .map(|p| phrase_words(p))
            .filter(|p| !p.is_empty())
            .collect()
    };
    let mut chitchat = phrases(&config.chitchat_phrases);
    // Longest phrases first, so "thank you" wins over "thank".
    chitchat.sort_by_key(|p| std::cmp::Reverse(p.len()));

    let stemmer = stemmer();
    for w in &config.domain_vocabulary {
        domain_terms.extend(stemmer.analyze(w));
    }

    let classifier = RuleClassifier {
        known_names,
        identifiers: lower(&config.identifier_keywords),
        action_verbs: lower(&config.action_verbs),
        discovery_words: lower(&config.discovery_words),
        chitchat,
        fillers: lower(&config.chitchat_fillers).into_iter().collect(),
        stopwords: lower(&config.stopwords).into_iter().collect(),
        back_references,
        domain_terms,
        stemmer,
        simple,
        analytical,
        legal,
        implementation: phrases(&config.implementation_words),
        troubleshooting: phrases(&config.troubleshooting_words),
        design: phrases(&config.design_words),
        config,
    };
    (classifier, errors)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_patterns_compile() {
        let (_, errors) = compile(RuleConfig::default(), HashSet::new());
        assert!(errors.is_empty(), "{errors:?}");
    }

    #[test]
    fn bad_patterns_and_thresholds_are_config_errors() {
        let e = RuleClassifier::builder()
            .act_pattern("(unclosed")
            .build()
            .unwrap_err();
        assert!(
            matches!(e, Error::Config(ref m) if m.contains("act_pattern")),
            "{e}"
        );
        let mut b = RuleClassifier::builder();
        b.config_mut().simple_patterns.push("[".into());
        assert!(b.build().is_err());
        assert!(RuleClassifier::builder()
            .short_query_words(0)
            .build()
            .is_err());
        assert!(RuleClassifier::builder()
            .short_query_words(6)
            .long_query_words(3)
            .build()
            .is_err());
    }
}
