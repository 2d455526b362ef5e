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

/// [`strip_thinking`] over text that arrives in pieces (a streamed reply): each piece in goes
/// out without `<think>...</think>` blocks and without the reply's leading and trailing
/// whitespace, so what comes out, pieces and [`finish`](Self::finish) together, is
/// `strip_thinking` of what went in. Text that may still turn out to be part of a tag, or
/// whitespace that may end the reply, is held until the next piece says.
#[derive(Debug, Clone, Default)]
pub struct ThinkingFilter {
    /// Text in, not yet known to be in or out of a block (a possible tag's beginning).
    pending: String,
    /// Inside a `<think>` block.
    thinking: bool,
    /// Whether anything but whitespace has gone out.
    started: bool,
    /// Whitespace held back: it goes out when more text follows it.
    spaces: String,
}

const OPEN: &str = "<think>";
const CLOSE: &str = "</think>";

impl ThinkingFilter {
    /// A filter at the start of a reply.
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes the next piece of the reply; returns what can go out now (maybe empty).
    pub fn push(&mut self, piece: &str) -> String {
        self.pending.push_str(piece);
        let mut out = String::new();
        loop {
            let tag = if self.thinking { CLOSE } else { OPEN };
            if let Some(i) = self.pending.find(tag) {
                if !self.thinking {
                    let before = self.pending[..i].to_string();
                    self.emit(&before, &mut out);
                }
                self.pending.drain(..i + tag.len());
                self.thinking = !self.thinking;
                continue;
            }
            // Keep the longest tail that could begin the tag; the rest is settled.
            let keep = (1..tag.len())
                .rev()
                .find(|&k| self.pending.ends_with(&tag[..k]))
                .unwrap_or(0);
            let settled = self.pending.len() - keep;
            if !self.thinking {
                let text = self.pending[..settled].to_string();
                self.emit(&text, &mut out);
            }
            self.pending.drain(..settled);
            return out;
        }
    }

    /// The end of the reply: what was held that is not thinking (trailing whitespace
    /// dropped).
    pub fn finish(&mut self) -> String {
        let mut out = String::new();
        if !self.thinking {
            let rest = std::mem::take(&mut self.pending);
            self.emit(&rest, &mut out);
        }
        self.pending.clear();
        self.spaces.clear();
        out
    }

    /// Sends `text` (outside any block) to `out`, less leading whitespace of the reply, with
    /// its trailing whitespace held.
    fn emit(&mut self, text: &str, out: &mut String) {
        let text = if self.started {
            text
        } else {
            text.trim_start()
        };
        let body = text.trim_end();
        if body.is_empty() {
            if self.started {
                self.spaces.push_str(text);
            }
            return;
        }
        out.push_str(&self.spaces);
        self.spaces.clear();
        out.push_str(body);
        self.spaces.push_str(&text[body.len()..]);
        self.started = true;
    }
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

    /// Every way of cutting a reply into pieces gives what `strip_thinking` gives the whole.
    #[test]
    fn streamed_thinking_is_stripped_as_the_whole_is() {
        let replies = [
            "<think>\nhm\n</think>\n\nYes.",
            "A <think>x</think>B<think>y",
            " plain ",
            "a < b <thin k> c </think> d",
            "\n\n<think></think>  Answer  with  spaces \n ",
            "x<think>a</thi</think>y",
            "",
        ];
        for reply in replies {
            let want = strip_thinking(reply);
            let bytes: Vec<usize> = (0..=reply.len())
                .filter(|&i| reply.is_char_boundary(i))
                .collect();
            // Cut after every character, and into two at every place.
            let mut cuts: Vec<Vec<usize>> = vec![bytes.clone()];
            cuts.extend(bytes.iter().map(|&i| vec![0, i, reply.len()]));
            for cut in cuts {
                let mut filter = ThinkingFilter::new();
                let mut got = String::new();
                for w in cut.windows(2) {
                    got.push_str(&filter.push(&reply[w[0]..w[1]]));
                }
                got.push_str(&filter.finish());
                assert_eq!(got, want, "{reply:?} cut at {cut:?}");
            }
        }
    }
}
