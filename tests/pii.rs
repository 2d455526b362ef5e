//! The PII guard: detection (with Luhn negatives), configurable kinds, and a pipeline that
//! refuses before any retrieval without ever echoing the value.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use rerank::query::PiiGuard;
use rerank::{Document, Error, Hit, PiiKind, Pipeline, Result, Retriever, SearchQuery};

fn kinds(text: &str) -> Vec<PiiKind> {
    PiiGuard::default().detect(text)
}

#[test]
fn ssn() {
    assert_eq!(kinds("my ssn is 123-45-6789"), [PiiKind::Ssn]);
    assert_eq!(kinds("SSN 123 45 6789 please"), [PiiKind::Ssn]);
    // Invalid areas, groups and serials, and numbers inside longer ones, are not SSNs.
    for text in [
        "000-12-3456",
        "666-12-3456",
        "912-12-3456",
        "123-00-4567",
        "123-45-0000",
        "1123-45-6789",
        "123-45-67890",
        "2023-01-15",
        "SSN",
    ] {
        assert!(kinds(text).is_empty(), "{text}: {:?}", kinds(text));
    }
}

#[test]
fn credit_cards_are_luhn_checked() {
    for text in [
        "4111111111111111",
        "card 4111 1111 1111 1111 expires soon",
        "5500-0000-0000-0004",
        "amex 378282246310005",
        "4012888888881881",
    ] {
        assert_eq!(kinds(text), [PiiKind::CreditCard], "{text}");
    }
    // Luhn negatives: one digit off, or too short / too long.
    for text in [
        "4111111111111112",
        "card 4111 1111 1111 1113",
        "5500-0000-0000-0005",
        "378282246310006",
        "411111111111",
        "41111111111111111111",
        "order 1234567890123",
    ] {
        assert!(kinds(text).is_empty(), "{text}: {:?}", kinds(text));
    }
    assert!(rerank::query::luhn_valid("79927398713"));
    assert!(!rerank::query::luhn_valid("79927398714"));
}

#[test]
fn emails() {
    assert_eq!(
        kinds("write to jo.smith+tag@mail.example.co.uk"),
        [PiiKind::Email]
    );
    assert_eq!(kinds("JOHN@EXAMPLE.COM"), [PiiKind::Email]);
    for text in ["email address", "user at example dot com", "@handle", "a@b"] {
        assert!(kinds(text).is_empty(), "{text}");
    }
}

#[test]
fn phones_us_and_international() {
    for text in [
        "call (415) 555-2671",
        "call 415-555-2671",
        "415.555.2671",
        "415 555 2671",
        "+1 415 555 2671",
        "1-415-555-2671",
        "+44 20 7946 0958",
        "+49 (30) 1234-5678",
        "+33 1 42 68 53 00",
        "+14155552671",
        "+91 98765 43210",
    ] {
        assert_eq!(kinds(text), [PiiKind::Phone], "{text}");
    }
    for text in [
        "phone number",
        "section 415 of the act",
        "x+5 = 10",
        "2024-06-01",
        "version 1.2.3",
        "+12 345",
    ] {
        assert!(kinds(text).is_empty(), "{text}: {:?}", kinds(text));
    }
}

#[test]
fn several_kinds_in_fixed_order_without_duplicates() {
    let text = "mail a@example.com or b@example.org, call +44 20 7946 0958, ssn 123-45-6789";
    assert_eq!(kinds(text), [PiiKind::Ssn, PiiKind::Email, PiiKind::Phone]);
    // A card number is a card, not also a phone number.
    assert_eq!(kinds("4111-1111-1111-1111"), [PiiKind::CreditCard]);
}

#[test]
fn kinds_are_configurable() {
    let only_email = PiiGuard::new([PiiKind::Email]);
    assert_eq!(only_email.kinds(), [PiiKind::Email]);
    assert!(only_email.detect("123-45-6789").is_empty());
    assert!(only_email.detect("call 415-555-2671").is_empty());
    assert_eq!(only_email.detect("a@example.com"), [PiiKind::Email]);
    assert!(PiiGuard::disabled()
        .detect("a@example.com 123-45-6789")
        .is_empty());
    assert!(PiiGuard::disabled().check("a@example.com").is_ok());
    // A card number left unreported still does not pass for a phone number.
    let only_phone = PiiGuard::new([PiiKind::Phone]);
    assert!(only_phone.detect("4111 1111 1111 1111").is_empty());
}

const SECRETS: [&str; 4] = [
    "123-45-6789",
    "4111 1111 1111 1111",
    "taylor.smith@example.com",
    "(415) 555-2671",
];

#[test]
fn the_error_never_contains_the_value() {
    let guard = PiiGuard::default();
    for secret in SECRETS {
        let err = guard.check(&format!("look up {secret} now")).unwrap_err();
        let shown = format!("{err} {err:?}");
        assert!(!shown.contains(secret), "{shown}");
        // No fragment of the digits either.
        for part in secret.split(|c: char| !c.is_ascii_alphanumeric()) {
            if part.len() >= 3 {
                assert!(!shown.contains(part), "{part} in {shown}");
            }
        }
        assert!(matches!(err, Error::PiiRefused { .. }));
    }
    let err = guard.check(&SECRETS.join(" and ")).unwrap_err();
    assert_eq!(
        err.to_string(),
        "query refused: it contains personal data (ssn, credit_card, email, phone)"
    );
    // The guard's own Debug holds no query.
    assert!(!format!("{guard:?}").contains('@'));
}

#[test]
fn redaction() {
    let guard = PiiGuard::default();
    let out = guard.redact("mail taylor.smith@example.com, ssn 123-45-6789 and 234-56-7891");
    assert_eq!(out, "mail [email], ssn [ssn] and [ssn]");
    assert_eq!(guard.redact("call +1 415 555 2671"), "call [phone]");
    assert_eq!(guard.redact("123-45-6789 234-56-7891"), "[ssn] [ssn]");
    assert_eq!(guard.redact("nothing here"), "nothing here");
}

/// Counts retrieval calls; any call on a refused query is a failure.
struct Counting {
    calls: Arc<AtomicUsize>,
}

impl Retriever for Counting {
    fn retrieve(&self, _q: &SearchQuery, _k: usize) -> Result<Vec<Hit>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Ok(vec![Hit::new(Arc::new(Document::new("1", "text")), 1.0)])
    }
}

#[test]
fn the_pipeline_refuses_before_retrieval() {
    let calls = Arc::new(AtomicUsize::new(0));
    let pipeline = Pipeline::builder()
        .retriever(Counting {
            calls: calls.clone(),
        })
        .build()
        .unwrap();
    for (query, expected) in [
        ("who has ssn 123-45-6789", vec![PiiKind::Ssn]),
        (
            "card 4111111111111111 of jo@example.com",
            vec![PiiKind::CreditCard, PiiKind::Email],
        ),
        ("call +44 20 7946 0958", vec![PiiKind::Phone]),
    ] {
        match pipeline.search(query) {
            Err(Error::PiiRefused { kinds }) => assert_eq!(kinds, expected, "{query}"),
            other => panic!("{query}: expected a refusal, got {other:?}"),
        }
    }
    // Variants are guarded too.
    let request = rerank::pipeline::SearchRequest::new("Taylor's KTN")
        .variants(["ktn of taylor@example.com"]);
    assert!(matches!(
        pipeline.search_with(&request),
        Err(Error::PiiRefused { .. })
    ));
    assert_eq!(
        calls.load(Ordering::SeqCst),
        0,
        "retrieval ran on a refused query"
    );

    // Clean queries and a disabled guard go through.
    assert!(pipeline.search("Taylor's passport number").is_ok());
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    let open = Pipeline::builder()
        .retriever(Counting {
            calls: calls.clone(),
        })
        .pii_guard(PiiGuard::disabled())
        .build()
        .unwrap();
    assert!(open.search("jo@example.com").is_ok());
    let emails_only = Pipeline::builder()
        .retriever(Counting {
            calls: calls.clone(),
        })
        .pii_guard(PiiGuard::new([PiiKind::Email]))
        .build()
        .unwrap();
    assert!(emails_only.search("call 415-555-2671").is_ok());
    assert!(emails_only.search("jo@example.com").is_err());
}
