use serde::{Deserialize, Serialize};

/// A kind of personal data the PII guard detects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PiiKind {
    /// A US social security number.
    Ssn,
    /// A payment card number (Luhn-checked).
    CreditCard,
    /// An email address.
    Email,
    /// A phone number: US and international forms, national forms after a trunk 0
    /// (`09-7625400`, `090-1234-5678`) and Chinese mobile numbers.
    Phone,
}

impl PiiKind {
    /// Every kind, in a fixed order.
    pub const ALL: [PiiKind; 4] = [
        PiiKind::Ssn,
        PiiKind::CreditCard,
        PiiKind::Email,
        PiiKind::Phone,
    ];

    /// The snake_case name (`ssn`, `credit_card`, `email`, `phone`).
    pub fn as_str(self) -> &'static str {
        match self {
            PiiKind::Ssn => "ssn",
            PiiKind::CreditCard => "credit_card",
            PiiKind::Email => "email",
            PiiKind::Phone => "phone",
        }
    }

    /// Joins kinds as `"ssn, email"`.
    pub fn join(kinds: &[PiiKind]) -> String {
        kinds
            .iter()
            .map(|k| k.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl std::fmt::Display for PiiKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
