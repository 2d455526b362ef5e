//! The PII guard: refuses queries that carry personal data, before anything else runs.

use std::sync::OnceLock;

use regex::Regex;

use super::PiiKind;
use crate::{Error, Result};

/// Detects personal data in a query: US social security numbers, payment card numbers
/// (Luhn-checked), email addresses and phone numbers (US and international forms).
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
/// assert!(matches!(err, Error::PiiRefused { ref kinds } if kinds == &[PiiKind::CreditCard, PiiKind::Email]));
/// assert!(!err.to_string().contains("4111"));
/// # Ok::<(), rerank::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PiiGuard {
    kinds: Vec<PiiKind>,
}

impl Default for PiiGuard {
    /// Detects every kind.
    fn default() -> Self {
        PiiGuard {
            kinds: PiiKind::ALL.to_vec(),
        }
    }
}

impl PiiGuard {
    /// A guard for the given kinds only (an empty list detects nothing).
    pub fn new(kinds: impl IntoIterator<Item = PiiKind>) -> Self {
        let mut kinds: Vec<PiiKind> = kinds.into_iter().collect();
        kinds.sort();
        kinds.dedup();
        PiiGuard { kinds }
    }

    /// A guard that detects nothing.
    pub fn disabled() -> Self {
        PiiGuard { kinds: Vec::new() }
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
        let mut masked = text.to_string();
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
            Err(Error::PiiRefused { kinds })
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
            // left. Each pass replaces at least one value, so this ends.
            loop {
                let spans = find(kind, &out);
                if spans.is_empty() {
                    break;
                }
                // Replace from the end so earlier spans stay valid.
                for (start, end) in spans.into_iter().rev() {
                    out.replace_range(start..end, &format!("[{kind}]"));
                }
            }
        }
        out
    }
}

/// Byte spans of the values of `kind` in `text`.
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
            (13..=19).contains(&digits.len()) && luhn_valid(&digits)
        }),
        PiiKind::Phone => {
            let mut out = spans(&re.us_phone, &|s: &str| {
                let n = digits_of(s).len();
                n == 10 || n == 11
            });
            out.extend(spans(&re.intl_phone, &|s: &str| {
                (8..=15).contains(&digits_of(s).len())
            }));
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
}

fn patterns() -> &'static Patterns {
    static P: OnceLock<Patterns> = OnceLock::new();
    P.get_or_init(|| Patterns {
        email: Regex::new(r"(?i)\b[a-z0-9._%+-]+@[a-z0-9-]+(?:\.[a-z0-9-]+)*\.[a-z]{2,}\b").ok(),
        // 123-45-6789 or 123 45 6789; not inside a longer number.
        ssn: Regex::new(r"(?:^|[^\d-])(\d{3}[- ]\d{2}[- ]\d{4})(?:$|[^\d-])").ok(),
        // 13 to 19 digits, optionally grouped by single spaces or dashes.
        card: Regex::new(r"\b\d(?:[ -]?\d){12,18}\b").ok(),
        // (415) 555-2671, 415-555-2671, 415.555.2671, 415 555 2671, +1 415 555 2671, 1-415-555-2671.
        us_phone: Regex::new(r"(?:\+?\b1[ .-]?)?(?:\(\d{3}\)\s?|\b\d{3}[ .-])\d{3}[ .-]\d{4}\b")
            .ok(),
        // +44 20 7946 0958, +49 (30) 1234-5678, +14155552671.
        intl_phone: Regex::new(r"\+\d{1,3}(?:[ .-]?\(?\d{1,5}\)?){1,6}\b").ok(),
    })
}

fn digits_of(s: &str) -> String {
    s.chars().filter(char::is_ascii_digit).collect()
}

/// A valid-looking SSN: area not 000, 666 or 9xx; group not 00; serial not 0000.
fn valid_ssn(s: &str) -> bool {
    let d = digits_of(s);
    if d.len() != 9 {
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
    fn ssn_validity() {
        assert!(valid_ssn("123-45-6789"));
        assert!(!valid_ssn("000-45-6789"));
        assert!(!valid_ssn("666-45-6789"));
        assert!(!valid_ssn("912-45-6789"));
        assert!(!valid_ssn("123-00-6789"));
        assert!(!valid_ssn("123-45-0000"));
    }
}
