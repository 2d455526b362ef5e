//! The PII guard: configurable kinds, and a pipeline that refuses before any retrieval without
//! ever echoing the value. The detection cases are data: `tests/data/pii_cases.toml`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use rerank::guard::PiiGuard;
use rerank::guard::PiiKind;
use rerank::recall::SearchQuery;
use rerank::{Document, Error, Hit, Pipeline, Result, Retriever};

#[test]
fn luhn_check() {
    assert!(rerank::guard::luhn_valid("79927398713"));
    assert!(!rerank::guard::luhn_valid("79927398714"));
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
        "Please remove personal information from your question (ssn, credit_card, email, \
         phone): it was refused before anything was searched."
    );
    // The refusal is the host's to word; {kinds} is filled in.
    let custom = guard.clone().message("No personal data, please ({kinds}).");
    assert_eq!(
        custom.check("mail jo@example.com").unwrap_err().to_string(),
        "No personal data, please (email)."
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
            Err(Error::PiiRefused { kinds, .. }) => assert_eq!(kinds, expected, "{query}"),
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
