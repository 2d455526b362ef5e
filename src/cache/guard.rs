//! The guard against near-identical queries that mean different things (negations, numbers,
//! swapped entities).

use std::collections::HashSet;

use crate::text::{plain_words, QUERY_STOPWORDS};

/// Words that negate.
const NEGATIONS: &[&str] = &[
    "not",
    "no",
    "never",
    "none",
    "nobody",
    "nothing",
    "neither",
    "nor",
    "without",
    "except",
    "excluding",
    "cannot",
    "cant",
    "dont",
    "doesnt",
    "didnt",
    "wont",
    "isnt",
    "arent",
    "wasnt",
    "werent",
    "shouldnt",
    "couldnt",
    "wouldnt",
    "hasnt",
    "havent",
    "hadnt",
    "mustnt",
    "neednt",
];

fn is_negation(word: &str) -> bool {
    NEGATIONS.contains(&word) || word.ends_with("n't")
}

/// Whether two queries that embed alike may share an answer: the same number of negations, the
/// same numbers, and the content words they share in the same order.
///
/// The last rule catches swapped entities ("flights from Boston to Denver" vs "from Denver to
/// Boston"); it also turns some harmless rephrasings into misses, which is the safe side.
pub fn may_share_answer(a: &str, b: &str) -> bool {
    let (wa, wb) = (plain_words(a), plain_words(b));
    let negations = |w: &[String]| w.iter().filter(|x| is_negation(x)).count();
    if negations(&wa) != negations(&wb) {
        return false;
    }
    let numbers = |w: &[String]| -> HashSet<String> {
        w.iter()
            .filter(|x| x.chars().any(|c| c.is_ascii_digit()))
            .cloned()
            .collect()
    };
    if numbers(&wa) != numbers(&wb) {
        return false;
    }
    let content = |w: &[String]| -> Vec<String> {
        let mut seen = HashSet::new();
        w.iter()
            .filter(|x| !QUERY_STOPWORDS.contains(&x.as_str()) && !is_negation(x))
            .filter(|x| seen.insert(x.to_string()))
            .cloned()
            .collect()
    };
    let (ca, cb) = (content(&wa), content(&wb));
    let set_b: HashSet<&String> = cb.iter().collect();
    let set_a: HashSet<&String> = ca.iter().collect();
    let shared_a: Vec<&String> = ca.iter().filter(|x| set_b.contains(x)).collect();
    let shared_b: Vec<&String> = cb.iter().filter(|x| set_a.contains(x)).collect();
    shared_a == shared_b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guard_rules() {
        assert!(!may_share_answer(
            "flights that allow pets",
            "flights that do not allow pets"
        ));
        assert!(!may_share_answer(
            "flights that allow pets",
            "flights that don't allow pets"
        ));
        assert!(!may_share_answer(
            "hotels with pools",
            "hotels without pools"
        ));
        assert!(!may_share_answer(
            "flights from Boston to Denver",
            "flights from Denver to Boston"
        ));
        assert!(!may_share_answer("Alice sued Bob", "Bob sued Alice"));
        assert!(!may_share_answer(
            "what does section 5 say",
            "what does section 6 say"
        ));
        assert!(may_share_answer(
            "What is the refund policy?",
            "the refund policy"
        ));
        assert!(may_share_answer(
            "flights that do not allow pets",
            "Flights that don't allow pets"
        ));
    }
}
