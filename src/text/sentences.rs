//! Sentence splitting for answers and sources (citations, grounding, extractive answers).

/// Abbreviations whose trailing period does not end a sentence.
const ABBREVIATIONS: &[&str] = &[
    "e.g", "i.e", "etc", "vs", "mr", "mrs", "ms", "dr", "prof", "st", "no", "fig", "al", "inc",
    "ltd", "co", "jr", "sr", "approx", "sec", "art", "u.s",
];

/// Splits `text` into sentences.
///
/// A sentence ends at `.`, `!` or `?` followed by whitespace (or the end of the text), and at
/// every line break. Periods inside square brackets (`[Source: report.v2.pdf]`), inside numbers
/// (`3.5`) and after common abbreviations (`e.g.`, `Dr.`) do not end a sentence; a citation right
/// after the end mark (`... 2023. [Source: a.pdf] Next.`) is a piece of its own. Pieces are
/// trimmed and empty ones dropped.
///
/// ```
/// use rerank::text::split_sentences;
/// assert_eq!(
///     split_sentences("Revenue was $3.5M [Source: r.v2.pdf, Page 3]. Costs fell!\nDone"),
///     ["Revenue was $3.5M [Source: r.v2.pdf, Page 3].", "Costs fell!", "Done"]
/// );
/// ```
pub fn split_sentences(text: &str) -> Vec<String> {
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let mut out = Vec::new();
    let mut start = 0usize;
    let mut depth = 0usize;
    let mut leading_group = false;
    let push = |from: usize, to: usize, out: &mut Vec<String>| {
        let piece = text[from..to].trim();
        if !piece.is_empty() {
            out.push(piece.to_string());
        }
    };
    for (i, &(pos, c)) in chars.iter().enumerate() {
        if pos < start {
            // Already part of the previous piece (a run of end marks).
            continue;
        }
        match c {
            '[' => {
                if depth == 0 && text[start..pos].trim().is_empty() {
                    leading_group = true;
                }
                depth += 1;
            }
            ']' => {
                depth = depth.saturating_sub(1);
                // A bracket group standing alone ("[Source: a.pdf]") is a piece of its own.
                let next_is_space = chars.get(i + 1).is_none_or(|&(_, n)| n.is_whitespace());
                if depth == 0 && leading_group && next_is_space {
                    let end = pos + 1;
                    push(start, end, &mut out);
                    start = end;
                }
                if depth == 0 {
                    leading_group = false;
                }
            }
            '\n' => {
                push(start, pos, &mut out);
                start = pos + 1;
                depth = 0;
                leading_group = false;
            }
            '.' | '!' | '?' if depth == 0 => {
                // Swallow runs of end marks and closing quotes or brackets: "...?!", "end.)".
                let mut j = i + 1;
                while j < chars.len() && matches!(chars[j].1, '.' | '!' | '?' | '"' | '\'' | ')') {
                    j += 1;
                }
                let at_end = j == chars.len();
                let before_space = !at_end && chars[j].1.is_whitespace();
                if !(at_end || before_space) {
                    continue;
                }
                if c == '.' && ends_with_abbreviation(&text[start..pos]) {
                    continue;
                }
                let end = if at_end { text.len() } else { chars[j].0 };
                push(start, end, &mut out);
                start = end;
            }
            _ => {}
        }
    }
    push(start, text.len(), &mut out);
    out
}

fn ends_with_abbreviation(before: &str) -> bool {
    let word = before
        .rsplit(|c: char| c.is_whitespace() || c == '(')
        .next()
        .unwrap_or("")
        .to_lowercase();
    ABBREVIATIONS.contains(&word.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_on_end_marks_and_lines() {
        assert_eq!(
            split_sentences("One. Two? Three!  Four\n\nFive."),
            ["One.", "Two?", "Three!", "Four", "Five."]
        );
        assert_eq!(
            split_sentences("Take vitamin C. It helps."),
            ["Take vitamin C.", "It helps."]
        );
    }

    #[test]
    fn keeps_numbers_abbreviations_and_brackets_together() {
        assert_eq!(
            split_sentences("Pi is 3.14, e.g. roughly. Dr. Smith said so [Source: a.b.pdf]. Ok."),
            [
                "Pi is 3.14, e.g. roughly.",
                "Dr. Smith said so [Source: a.b.pdf].",
                "Ok."
            ]
        );
    }

    #[test]
    fn a_citation_after_the_period_is_its_own_piece() {
        assert_eq!(
            split_sentences("Revenue rose. [Source: r.pdf, Page 2] Costs fell."),
            ["Revenue rose.", "[Source: r.pdf, Page 2]", "Costs fell."]
        );
        assert_eq!(
            split_sentences("Revenue rose. [Source: r.pdf, Page 2]"),
            ["Revenue rose.", "[Source: r.pdf, Page 2]"]
        );
    }

    #[test]
    fn empty_and_whitespace() {
        assert!(split_sentences("").is_empty());
        assert!(split_sentences(" \n\t ").is_empty());
        assert_eq!(split_sentences("no end mark"), ["no end mark"]);
        assert_eq!(split_sentences("Wait... what?!"), ["Wait...", "what?!"]);
    }
}
