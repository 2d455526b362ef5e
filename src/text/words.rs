//! Query words: splitting with possessives, plain words, phrase matching, and the stopwords
//! of queries (shared by the rule classifier, protected reranking and the semantic cache).

/// Function words, pronouns, auxiliaries and question words: what is left after removing these
/// (and the action verbs) is the searchable part of a query.
pub const QUERY_STOPWORDS: &[&str] = &[
    "a",
    "an",
    "the",
    "and",
    "or",
    "but",
    "if",
    "then",
    "so",
    "of",
    "in",
    "on",
    "at",
    "to",
    "for",
    "from",
    "by",
    "with",
    "without",
    "into",
    "onto",
    "over",
    "under",
    "about",
    "as",
    "than",
    "up",
    "down",
    "out",
    "off",
    "i",
    "me",
    "my",
    "mine",
    "myself",
    "we",
    "us",
    "our",
    "ours",
    "you",
    "your",
    "yours",
    "he",
    "him",
    "his",
    "she",
    "her",
    "hers",
    "it",
    "its",
    "they",
    "them",
    "their",
    "theirs",
    "this",
    "that",
    "these",
    "those",
    "there",
    "here",
    "what",
    "which",
    "who",
    "whom",
    "whose",
    "when",
    "where",
    "why",
    "how",
    "is",
    "am",
    "are",
    "was",
    "were",
    "be",
    "been",
    "being",
    "do",
    "does",
    "did",
    "done",
    "have",
    "has",
    "had",
    "can",
    "could",
    "will",
    "would",
    "shall",
    "should",
    "may",
    "might",
    "must",
    "please",
    "more",
    "some",
    "any",
    "all",
    "just",
    "also",
    "again",
    "one",
    "ones",
    "thing",
    "things",
    "stuff",
    "something",
    "anything",
    "everything",
    "else",
    "same",
    "other",
    "ok",
    "okay",
    "yes",
    "no",
    "not",
    "very",
    "really",
    "let",
    "lets",
    "get",
    "give",
    "want",
    "need",
    "know",
    "like",
    "see",
];

/// One word of a query, lower-cased, with a trailing possessive (`'s`, `’s`, `s'`) removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Word {
    /// The lower-cased word without its possessive ending.
    pub text: String,
    /// True when the word ended in a possessive (`Taylor's`, `James'`).
    pub possessive: bool,
    /// True when the word began with an upper-case letter (`Penal`, `IPC`).
    pub capitalized: bool,
    /// True when the word begins the text or a sentence (after `.`, `!`, `?`, `:`, `;` or a
    /// line break), where a capital says nothing about names.
    pub sentence_start: bool,
}

/// Splits `text` into words: runs of letters and digits, keeping apostrophes inside a word
/// (`don't`, `Taylor's`); curly apostrophes count as straight ones. Everything else separates
/// words. Possessive endings are stripped and flagged.
pub(crate) fn words(text: &str) -> Vec<Word> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut capitalized = false;
    // A sentence ends before the first word too.
    let mut sentence_end = true;
    let chars: Vec<char> = text.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        let c = if c == '\u{2019}' || c == '\u{2018}' {
            '\''
        } else {
            c
        };
        if c.is_alphanumeric() {
            if current.is_empty() {
                capitalized = c.is_uppercase();
            }
            current.extend(c.to_lowercase());
        } else if c == '\'' && !current.is_empty() {
            // Keep an apostrophe only when it sits between word characters or closes a
            // plural possessive (`James'`).
            let next_is_word = chars.get(i + 1).is_some_and(|n| n.is_alphanumeric());
            if next_is_word || current.ends_with('s') {
                current.push('\'');
            } else {
                push_word(&mut out, &mut current, capitalized, &mut sentence_end);
            }
        } else {
            push_word(&mut out, &mut current, capitalized, &mut sentence_end);
            if matches!(c, '.' | '!' | '?' | ':' | ';' | '\n') {
                sentence_end = true;
            }
        }
    }
    push_word(&mut out, &mut current, capitalized, &mut sentence_end);
    out
}

/// Words whose `'s` is a contraction (`is`, `has`, `us`) rather than a possessive.
const CONTRACTION_BASES: [&str; 14] = [
    "what", "it", "that", "he", "she", "there", "here", "who", "where", "how", "let", "when",
    "why", "this",
];

fn push_word(
    out: &mut Vec<Word>,
    current: &mut String,
    capitalized: bool,
    sentence_end: &mut bool,
) {
    if current.is_empty() {
        return;
    }
    let raw = std::mem::take(current);
    let (text, possessive) = if let Some(base) = raw.strip_suffix("'s") {
        (base.to_string(), true)
    } else if let Some(base) = raw.strip_suffix('\'') {
        (base.to_string(), true)
    } else {
        (raw, false)
    };
    let text = text.trim_matches('\'').to_string();
    // `what's`, `it's`, `let's` are contractions, not possessives.
    let possessive = possessive && !CONTRACTION_BASES.contains(&text.as_str());
    if !text.is_empty() {
        out.push(Word {
            text,
            possessive,
            capitalized,
            sentence_start: std::mem::take(sentence_end),
        });
    }
}

/// The lower-cased words of `text`, possessives stripped.
pub(crate) fn plain_words(text: &str) -> Vec<String> {
    words(text).into_iter().map(|w| w.text).collect()
}

/// Whether `token` is `word` or a regular inflection of it (`-s`, `-es`, `-d`, `-ed`, `-ing`,
/// `e` dropped before `-ing`), or its singular when `word` ends in `s`.
pub(crate) fn is_form_of(token: &str, word: &str) -> bool {
    if token == word {
        return true;
    }
    if let Some(rest) = token.strip_prefix(word) {
        if matches!(rest, "s" | "es" | "d" | "ed" | "ing") {
            return true;
        }
    }
    if let Some(stem) = word.strip_suffix('e') {
        if token.strip_prefix(stem) == Some("ing") {
            return true;
        }
    }
    if let Some(singular) = word.strip_suffix('s') {
        if token == singular {
            return true;
        }
    }
    false
}

/// Whether the word sequence contains `phrase` (one or more space-separated lower-case words),
/// each word of the phrase compared exactly.
pub(crate) fn contains_phrase(words: &[String], phrase: &[String]) -> bool {
    !phrase.is_empty() && words.windows(phrase.len()).any(|w| w == phrase)
}

/// Splits a lower-case phrase into its words (same rules as [`words`]).
pub(crate) fn phrase_words(phrase: &str) -> Vec<String> {
    plain_words(phrase)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capitals_and_sentence_starts_are_flagged() {
        let flags: Vec<(bool, bool)> = words("Penal Code. write code: Fix it; IPC")
            .iter()
            .map(|w| (w.capitalized, w.sentence_start))
            .collect();
        assert_eq!(
            flags,
            [
                (true, true),
                (true, false),
                (false, true),
                (false, false),
                (true, true),
                (false, false),
                (true, true)
            ]
        );
    }

    #[test]
    fn possessives_and_apostrophes() {
        let w = words("Taylor's KTN, James' car and don't stop; Alex’s phone");
        let texts: Vec<&str> = w.iter().map(|w| w.text.as_str()).collect();
        assert_eq!(
            texts,
            ["taylor", "ktn", "james", "car", "and", "don't", "stop", "alex", "phone"]
        );
        assert!(w[0].possessive);
        assert!(!w[1].possessive);
        assert!(w[2].possessive);
        assert!(w[7].possessive);
        let w = words("what's Taylor's KTN");
        assert!(!w[0].possessive);
        assert!(w[1].possessive);
    }

    #[test]
    fn quotes_are_not_words() {
        assert_eq!(plain_words("'hello' 'world'"), ["hello", "world"]);
        assert_eq!(plain_words("it's"), ["it"]);
        assert!(plain_words("!!! ' ?").is_empty());
    }

    #[test]
    fn inflections() {
        assert!(is_form_of("summarizes", "summarize"));
        assert!(is_form_of("summarizing", "summarize"));
        assert!(is_form_of("analyzed", "analyze"));
        assert!(is_form_of("file", "files"));
        assert!(is_form_of("discussed", "discuss"));
        assert!(is_form_of("discusses", "discuss"));
        assert!(!is_form_of("shower", "show"));
        assert!(!is_form_of("helpful", "help"));
    }

    #[test]
    fn phrases() {
        let w = plain_words("good morning to you");
        assert!(contains_phrase(&w, &phrase_words("good morning")));
        assert!(!contains_phrase(&w, &phrase_words("morning good")));
        assert!(!contains_phrase(&w, &[]));
    }
}
