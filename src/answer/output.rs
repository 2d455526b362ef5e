//! Reading a generator's output: thinking blocks, citations, the not-enough-information sentence.

use super::Citation;

/// The distinct citations of `text`, in order of first appearance.
pub fn distinct_citations(text: &str) -> Vec<Citation> {
    let mut out: Vec<Citation> = Vec::new();
    for c in Citation::parse_all(text) {
        if !out.contains(&c) {
            out.push(c);
        }
    }
    out
}

/// Whether `text` says there is not enough information: it is exactly
/// [`NOT_ENOUGH_INFORMATION`](super::NOT_ENOUGH_INFORMATION), ignoring case, surrounding space,
/// typographic apostrophes and a missing final period.
pub fn is_not_enough_information(text: &str) -> bool {
    let norm = |s: &str| {
        s.trim()
            .trim_end_matches('.')
            .to_lowercase()
            .replace(['\u{2019}', '\u{2018}'], "'")
    };
    norm(text) == norm(super::NOT_ENOUGH_INFORMATION)
}

/// `text` without `<think>...</think>` blocks (an unterminated one runs to the end), trimmed.
pub fn strip_thinking(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("<think>") {
        out.push_str(&rest[..i]);
        match rest[i..].find("</think>") {
            Some(j) => rest = &rest[i + j + "</think>".len()..],
            None => {
                rest = "";
                break;
            }
        }
    }
    out.push_str(rest);
    out.trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_enough_information_matches_loosely() {
        assert!(is_not_enough_information(
            super::super::NOT_ENOUGH_INFORMATION
        ));
        assert!(is_not_enough_information(
            "  I don\u{2019}t have enough information in the provided documents to answer this question"
        ));
        assert!(!is_not_enough_information(
            "I don't have enough information."
        ));
    }

    #[test]
    fn thinking_is_stripped() {
        assert_eq!(strip_thinking("<think>\nhm\n</think>\n\nYes."), "Yes.");
        assert_eq!(strip_thinking("A <think>x</think>B<think>y"), "A B");
        assert_eq!(strip_thinking(" plain "), "plain");
    }

    #[test]
    fn citations_are_distinct_in_order() {
        let t = "a [Source: x] b [Source: y, Page 2] c [Source: x]";
        assert_eq!(
            distinct_citations(t),
            [Citation::new("x", None), Citation::new("y", Some(2))]
        );
    }
}
