//! The PII guard: refuses queries that carry personal data, before anything else runs.

use std::sync::OnceLock;

use regex::Regex;

use super::PiiKind;
use crate::{Error, Result};

/// Detects personal data in a query: US social security numbers, payment card numbers
/// (Luhn-checked), email addresses and phone numbers (US, international and national forms).
///
/// The guard never keeps, logs or returns the values it finds: [`PiiGuard::detect`] returns only
/// the kinds, and [`PiiGuard::check`] an [`Error::PiiRefused`] naming them.
///
/// ```
/// use rerank::guard::PiiGuard;
/// use rerank::Error;
/// use rerank::guard::PiiKind;
///
/// let guard = PiiGuard::default();
/// assert!(guard.check("Taylor's passport number").is_ok());
/// let err = guard.check("card 4111 1111 1111 1111, mail jo@example.com").unwrap_err();
/// assert!(matches!(err, Error::PiiRefused { ref kinds, .. } if kinds == &[PiiKind::CreditCard, PiiKind::Email]));
/// assert!(!err.to_string().contains("4111"));
/// # Ok::<(), rerank::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PiiGuard {
    kinds: Vec<PiiKind>,
    message: String,
}

/// The refusal a user reads by default; `{kinds}` becomes the kinds found (`email, phone`).
pub const DEFAULT_REFUSAL: &str =
    "Please remove personal information from your question ({kinds}): it was refused before \
     anything was searched.";

impl Default for PiiGuard {
    /// Detects every kind.
    fn default() -> Self {
        PiiGuard {
            kinds: PiiKind::ALL.to_vec(),
            message: DEFAULT_REFUSAL.into(),
        }
    }
}

impl PiiGuard {
    /// A guard for the given kinds only (an empty list detects nothing).
    pub fn new(kinds: impl IntoIterator<Item = PiiKind>) -> Self {
        let mut kinds: Vec<PiiKind> = kinds.into_iter().collect();
        kinds.sort();
        kinds.dedup();
        PiiGuard {
            kinds,
            message: DEFAULT_REFUSAL.into(),
        }
    }

    /// A guard that detects nothing.
    pub fn disabled() -> Self {
        PiiGuard::new([])
    }

    /// Sets the refusal the user reads ([`Error::PiiRefused`]'s message); `{kinds}` in it
    /// becomes the kinds found. Default: [`DEFAULT_REFUSAL`].
    pub fn message(mut self, message: impl Into<String>) -> Self {
        self.message = message.into();
        self
    }

    /// The refusal for `kinds` (non-empty): [`Error::PiiRefused`] with the message.
    pub fn refusal(&self, kinds: Vec<PiiKind>) -> Error {
        let message = self.message.replace("{kinds}", &PiiKind::join(&kinds));
        Error::PiiRefused { kinds, message }
    }

    /// The kinds this guard detects.
    pub fn kinds(&self) -> &[PiiKind] {
        &self.kinds
    }

    /// The kinds of personal data in `text`, in [`PiiKind::ALL`] order, without duplicates.
    ///
    /// Kinds are found in this order, each found value masked before the next kind is looked
    /// for: email, SSN, card, phone (so a card number is not also reported as a phone number).
    pub fn detect(&self, text: &str) -> Vec<PiiKind> {
        if self.kinds.is_empty() {
            return Vec::new();
        }
        let mut found = Vec::new();
        let mut masked = Normalized::new(text).text;
        for kind in [
            PiiKind::Email,
            PiiKind::Ssn,
            PiiKind::CreditCard,
            PiiKind::Phone,
        ] {
            let spans = find(kind, &masked);
            if spans.is_empty() {
                continue;
            }
            if self.kinds.contains(&kind) {
                found.push(kind);
            }
            // Mask even kinds that are not reported, so they cannot pass for another kind.
            for (start, end) in spans {
                masked.replace_range(start..end, &" ".repeat(end - start));
            }
        }
        found.sort();
        found
    }

    /// `Ok(())` when `text` holds none of the guarded kinds, else [`Error::PiiRefused`] naming
    /// the kinds found (never the values).
    pub fn check(&self, text: &str) -> Result<()> {
        let kinds = self.detect(text);
        if kinds.is_empty() {
            Ok(())
        } else {
            Err(self.refusal(kinds))
        }
    }

    /// `text` with every guarded value replaced by `[kind]` (e.g. `[email]`), for hosts that
    /// want to log or forward a query safely.
    pub fn redact(&self, text: &str) -> String {
        let mut out = text.to_string();
        for kind in [
            PiiKind::Email,
            PiiKind::Ssn,
            PiiKind::CreditCard,
            PiiKind::Phone,
        ] {
            if !self.kinds.contains(&kind) {
                continue;
            }
            // Matches may share a separator (two SSNs one space apart): repeat until none is
            // left. Each pass replaces at least one value, so this ends. Values are found in
            // the normalized text and replaced in the original (the rest of it is unchanged).
            loop {
                let normalized = Normalized::new(&out);
                let spans = find(kind, &normalized.text);
                if spans.is_empty() {
                    break;
                }
                // Replace from the end so earlier spans stay valid.
                for (start, end) in spans.into_iter().rev() {
                    let (start, end) = normalized.original(start, end);
                    out.replace_range(start..end, &format!("[{kind}]"));
                }
            }
        }
        out
    }
}

/// A query as the patterns read it, with the way back to the original text.
///
/// Personal data can be written so that a pattern over ASCII misses it: digits of another
/// script (full-width `１２３`, Arabic-Indic `١٢٣`, Devanagari `१२३`, ... every Unicode decimal
/// digit), separators other than a space or a dash (no-break, thin and ideographic spaces, en
/// and em dashes, the minus sign, dot leaders), invisible characters between the digits (zero
/// width space and joiners, soft hyphen, word joiner, byte order mark, direction marks), and
/// full-width letters and signs (`＠`). Normalizing maps each of these to its ASCII form (or
/// drops it) before the patterns run, so they see `123-45-6789` however it was typed.
struct Normalized {
    /// The normalized text.
    text: String,
    /// Per byte of `text`, the byte range of the original character it came from.
    from: Vec<(usize, usize)>,
}

impl Normalized {
    fn new(original: &str) -> Self {
        let mut text = String::with_capacity(original.len());
        let mut from = Vec::with_capacity(original.len());
        for (at, c) in original.char_indices() {
            let Some(n) = normalize_char(c) else { continue };
            let before = text.len();
            text.push(n);
            let span = (at, at + c.len_utf8());
            from.extend(std::iter::repeat_n(span, text.len() - before));
        }
        Normalized { text, from }
    }

    /// The byte range of the original text that `start..end` of the normalized text came
    /// from (`start < end`).
    fn original(&self, start: usize, end: usize) -> (usize, usize) {
        (self.from[start].0, self.from[end - 1].1)
    }
}

/// `c` as the patterns should read it; `None` for an invisible character.
fn normalize_char(c: char) -> Option<char> {
    if c.is_ascii() {
        return Some(c);
    }
    let n = match c {
        // Invisible: soft hyphen, Mongolian vowel separator, zero-width space, non-joiner,
        // joiner, direction marks and embeddings, word joiner and invisible operators, byte
        // order mark.
        '\u{AD}'
        | '\u{180E}'
        | '\u{200B}'..='\u{200F}'
        | '\u{202A}'..='\u{202E}'
        | '\u{2060}'..='\u{2064}'
        | '\u{2066}'..='\u{2069}'
        | '\u{FEFF}' => return None,
        // Dashes: hyphen, non-breaking hyphen, figure dash, en and em dash, horizontal bar,
        // minus sign, small and full-width hyphen-minus.
        '\u{2010}'..='\u{2015}' | '\u{2212}' | '\u{FE58}' | '\u{FE63}' => '-',
        // Dots: middle dot, one dot leader, hyphenation point, katakana middle dot, small full
        // stop.
        '\u{B7}' | '\u{2024}' | '\u{2027}' | '\u{30FB}' | '\u{FE52}' => '.',
        '\u{FE6B}' => '@',
        // Full-width ASCII (`＠`, `．`, `－`, letters and digits).
        '\u{FF01}'..='\u{FF5E}' => char::from_u32(c as u32 - 0xFEE0).unwrap_or(c),
        // Every other space: no-break, en to hair, narrow no-break, ideographic.
        c if c.is_whitespace() => ' ',
        c => decimal_digit(c).unwrap_or(c),
    };
    Some(n)
}

/// The ASCII digit of a Unicode decimal digit (general category Nd) of any script.
///
/// Unicode encodes each script's decimal digits as one run of ten code points, zero to nine
/// (some runs follow each other, e.g. the mathematical digits): the value is the distance from
/// the start of the run, modulo ten.
fn decimal_digit(c: char) -> Option<char> {
    if !c.is_numeric() || !is_decimal_digit(c) {
        return None;
    }
    let mut start = c as u32;
    while let Some(prev) = start.checked_sub(1).and_then(char::from_u32) {
        if !is_decimal_digit(prev) {
            break;
        }
        start -= 1;
    }
    let value = (c as u32 - start) % 10;
    char::from_digit(value, 10)
}

fn is_decimal_digit(c: char) -> bool {
    static ND: OnceLock<Option<Regex>> = OnceLock::new();
    let nd = ND.get_or_init(|| Regex::new(r"^\p{Nd}$").ok());
    let mut buf = [0u8; 4];
    nd.as_ref()
        .is_some_and(|r| r.is_match(c.encode_utf8(&mut buf)))
}

/// Byte spans of the values of `kind` in `text` (normalized: see [`Normalized`]).
fn find(kind: PiiKind, text: &str) -> Vec<(usize, usize)> {
    let re = patterns();
    let spans = |r: &Option<Regex>, valid: &dyn Fn(&str) -> bool| -> Vec<(usize, usize)> {
        r.iter()
            .flat_map(|r| r.find_iter(text))
            .filter(|m| valid(m.as_str()))
            .map(|m| (m.start(), m.end()))
            .collect()
    };
    match kind {
        PiiKind::Email => spans(&re.email, &|_: &str| true),
        PiiKind::Ssn => re
            .ssn
            .iter()
            .flat_map(|r| r.captures_iter(text))
            .filter_map(|c| c.get(1))
            .filter(|m| valid_ssn(m.as_str()))
            .map(|m| (m.start(), m.end()))
            .collect(),
        PiiKind::CreditCard => spans(&re.card, &|s: &str| {
            let digits = digits_of(s);
            (13..=19).contains(&digits.len()) && !is_timestamp(&digits) && luhn_valid(&digits)
        }),
        PiiKind::Phone => {
            let mut out = spans(&re.us_phone, &|s: &str| {
                let n = digits_of(s).len();
                n == 10 || n == 11
            });
            out.extend(spans(&re.intl_phone, &|s: &str| {
                (8..=15).contains(&digits_of(s).len())
            }));
            // These two have no `+` or `(` to start them: only a number standing alone, not
            // the tail of a longer one (`5500-0000-0000-0005`, a card number that fails Luhn).
            for (r, valid) in [
                (
                    &re.national_phone,
                    &valid_national_phone as &dyn Fn(&str) -> bool,
                ),
                (&re.cn_mobile, &|_: &str| true),
            ] {
                out.extend(
                    spans(r, valid)
                        .into_iter()
                        .filter(|&(start, end)| standalone(text, start, end)),
                );
            }
            out.sort();
            // Drop spans overlapping an earlier one.
            let mut merged: Vec<(usize, usize)> = Vec::new();
            for (s, e) in out {
                match merged.last_mut() {
                    Some(last) if s < last.1 => last.1 = last.1.max(e),
                    _ => merged.push((s, e)),
                }
            }
            merged
        }
    }
}

struct Patterns {
    email: Option<Regex>,
    ssn: Option<Regex>,
    card: Option<Regex>,
    us_phone: Option<Regex>,
    intl_phone: Option<Regex>,
    national_phone: Option<Regex>,
    cn_mobile: Option<Regex>,
}

fn patterns() -> &'static Patterns {
    static P: OnceLock<Patterns> = OnceLock::new();
    P.get_or_init(|| Patterns {
        // Letters and digits of any script (`josé@exämple.de`, `用户@例子.公司`); a top-level
        // domain of letters, or punycode (`.xn--p1ai`).
        email: Regex::new(
            r"(?i)\b[\p{L}\p{N}._%+-]+@[\p{L}\p{N}-]+(?:\.[\p{L}\p{N}-]+)*\.(?:xn--[\p{L}\p{N}]+(?:-[\p{L}\p{N}]+)*|\p{L}{2,})\b",
        )
        .ok(),
        // 123-45-6789, 123 45 6789 or 123.45.6789 (one separator throughout: `valid_ssn`);
        // not inside a longer number.
        ssn: Regex::new(r"(?:^|[^\d.-])(\d{3}[-. ]\d{2}[-. ]\d{4})(?:$|[^\d-]|\.(?:$|\D))").ok(),
        // 13 to 19 digits, optionally grouped by single spaces, dashes or dots.
        card: Regex::new(r"\b\d(?:[ .-]?\d){12,18}\b").ok(),
        // (415) 555-2671, 415-555-2671, 415.555.2671, 415 555 2671, +1 415 555 2671, 1-415-555-2671.
        us_phone: Regex::new(r"(?:\+?\b1[ .-]?)?(?:\(\d{3}\)\s?|\b\d{3}[ .-])\d{3}[ .-]\d{4}\b")
            .ok(),
        // +44 20 7946 0958, +49 (30) 1234-5678, +14155552671.
        intl_phone: Regex::new(r"\+\d{1,3}(?:[ .-]?\(?\d{1,5}\)?){1,6}\b").ok(),
        // National forms after a trunk 0, one separator throughout: 09-7625400 (Israel),
        // 090-1234-5678 (Japan), 020 7946 0958 (UK), 01 42 68 53 00 (France), 030.1234567.
        national_phone: Regex::new(
            r"\b0\d{1,4}(?:(?:-\d{2,8}){1,4}|(?:\.\d{2,8}){1,4}|(?: \d{2,8}){1,4})\b",
        )
        .ok(),
        // Chinese mobile numbers: 13812345678, 138 1234 5678, 138-1234-5678.
        cn_mobile: Regex::new(r"\b1[3-9]\d(?:[ -]?\d{4}){2}\b").ok(),
    })
}

/// A national phone number as [`Patterns::national_phone`] found it: 10 to 12 digits, or 9 as
/// an area code and one block of seven (Israel's `09-7625400`). Not 9 digits in other groups:
/// `078 00 1123` has the shape of an SSN (one that is not valid), not of a phone number.
fn valid_national_phone(s: &str) -> bool {
    let groups: Vec<usize> = s
        .split(|c: char| !c.is_ascii_digit())
        .filter(|g| !g.is_empty())
        .map(str::len)
        .collect();
    match groups.iter().sum::<usize>() {
        10..=12 => true,
        9 => groups == [2, 7],
        _ => false,
    }
}

/// Whether `text[start..end]` stands alone: neither side goes on with a digit, or with a
/// separator and a digit.
fn standalone(text: &str, start: usize, end: usize) -> bool {
    fn continues(mut chars: impl Iterator<Item = char>) -> bool {
        match chars.next() {
            Some(c) if c.is_ascii_digit() => true,
            Some(' ' | '.' | '-') => chars.next().is_some_and(|c| c.is_ascii_digit()),
            _ => false,
        }
    }
    !continues(text[..start].chars().rev()) && !continues(text[end..].chars())
}

/// A Unix time in milliseconds (13 digits starting with 1: September 2001 to 2286), which is
/// no card number: the 13-digit card numbers were Visa's, starting with 4. Presidio rejects the
/// same shape.
fn is_timestamp(digits: &str) -> bool {
    digits.len() == 13 && digits.starts_with('1')
}

fn digits_of(s: &str) -> String {
    s.chars().filter(char::is_ascii_digit).collect()
}

/// A valid-looking SSN: area not 000, 666 or 9xx; group not 00; serial not 0000; the same
/// separator twice (`693-09.4444` is not an SSN).
fn valid_ssn(s: &str) -> bool {
    let d = digits_of(s);
    if d.len() != 9 {
        return false;
    }
    let separators: Vec<char> = s.chars().filter(|c| !c.is_ascii_digit()).collect();
    if separators.windows(2).any(|w| w[0] != w[1]) {
        return false;
    }
    let (area, group, serial) = (&d[0..3], &d[3..5], &d[5..9]);
    area != "000" && area != "666" && !area.starts_with('9') && group != "00" && serial != "0000"
}

/// The Luhn checksum over a string of ASCII digits.
pub fn luhn_valid(digits: &str) -> bool {
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return false;
    }
    let sum: u32 = digits
        .bytes()
        .rev()
        .enumerate()
        .map(|(i, b)| {
            let d = u32::from(b - b'0');
            if i % 2 == 1 {
                let x = d * 2;
                if x > 9 {
                    x - 9
                } else {
                    x
                }
            } else {
                d
            }
        })
        .sum();
    sum.is_multiple_of(10)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn luhn() {
        assert!(luhn_valid("4111111111111111"));
        assert!(luhn_valid("79927398713"));
        assert!(!luhn_valid("79927398710"));
        assert!(!luhn_valid("4111111111111112"));
        assert!(!luhn_valid(""));
        assert!(!luhn_valid("12a4"));
    }

    #[test]
    fn digits_of_every_script_become_ascii() {
        for (c, d) in [
            ('٧', '7'),
            ('۴', '4'),
            ('९', '9'),
            ('৪', '4'),
            ('໕', '5'),
            ('３', '3'),
            ('\u{1D7D8}', '0'),
            ('\u{1D7E1}', '9'),
            ('\u{1D7FF}', '9'),
        ] {
            assert_eq!(normalize_char(c), Some(d), "{c:?}");
        }
        // Superscripts, fractions and roman numerals are numbers, not decimal digits.
        for c in ['²', '½', 'Ⅻ', 'a', 'é'] {
            assert_eq!(decimal_digit(c), None, "{c:?}");
        }
        assert_eq!(normalize_char('\u{200B}'), None);
        assert_eq!(normalize_char('\u{A0}'), Some(' '));
        assert_eq!(normalize_char('\u{2013}'), Some('-'));
    }

    #[test]
    fn normalized_values_are_redacted_in_the_original_text() {
        let g = PiiGuard::default();
        assert_eq!(
            g.redact("ssn １２３－４５－６７８９ and café"),
            "ssn [ssn] and café"
        );
        assert_eq!(
            g.redact("call 4111\u{200B}1111\u{A0}1111 1111 now ١"),
            "call [credit_card] now ١"
        );
        assert_eq!(g.redact("to josé@exämple.de, ok"), "to [email], ok");
        assert_eq!(g.redact("a@xn--d1acufc.xn--p1ai."), "[email].");
    }

    /// One case of `tests/data/pii_presidio_cases.toml`.
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct PresidioCase {
        text: String,
        /// What the guard detects.
        kinds: Vec<PiiKind>,
        /// Presidio's answer, where the guard deliberately differs (argued beside the case).
        presidio: Option<Vec<PiiKind>>,
    }

    #[derive(serde::Deserialize)]
    struct PresidioCases {
        case: Vec<PresidioCase>,
    }

    /// Presidio's recognizer test inputs: the guard answers each as the file says, and agrees
    /// with Presidio on all but the differences listed there.
    #[test]
    fn presidio_recognizer_cases() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/data/pii_presidio_cases.toml"
        );
        let text = std::fs::read_to_string(path).unwrap();
        let cases: PresidioCases = toml::from_str(&text).unwrap();
        let guard = PiiGuard::default();
        let failures: Vec<String> = cases
            .case
            .iter()
            .filter_map(|c| {
                let got = guard.detect(&c.text);
                (got != c.kinds).then(|| format!("{:?}: got {got:?}, want {:?}", c.text, c.kinds))
            })
            .collect();
        let differ = cases.case.iter().filter(|c| c.presidio.is_some()).count();
        assert!(
            failures.is_empty(),
            "{} of {} Presidio cases failed:\n{}",
            failures.len(),
            cases.case.len(),
            failures.join("\n")
        );
        for c in &cases.case {
            assert_ne!(c.presidio.as_ref(), Some(&c.kinds), "{:?}", c.text);
        }
        eprintln!(
            "Presidio's recognizer cases: {} of {} agree, {differ} argued differences",
            cases.case.len() - differ,
            cases.case.len()
        );
    }

    #[test]
    fn ssn_validity() {
        assert!(valid_ssn("123-45-6789"));
        assert!(!valid_ssn("000-45-6789"));
        assert!(!valid_ssn("666-45-6789"));
        assert!(!valid_ssn("912-45-6789"));
        assert!(!valid_ssn("123-00-6789"));
        assert!(!valid_ssn("123-45-0000"));
        assert!(valid_ssn("123.45.6789"));
        assert!(valid_ssn("123 45 6789"));
        assert!(!valid_ssn("693-09.4444"));
        assert!(!valid_ssn("123-45 6789"));
    }
}
