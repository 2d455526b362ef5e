//! RuleClassifier: every example from the query-intelligence issue, plus configurability.

use std::collections::BTreeMap;

use rerank::classify::{Intent, QueryKind, Route};
use rerank::classify::{RuleClassifier, RuleConfig};
use rerank::QueryClassifier;

fn with_taylor() -> RuleClassifier {
    RuleClassifier::builder()
        .alias("Taylor", "Taylor Smith")
        .build()
        .unwrap()
}

fn has(signals: &[String], prefix: &str) -> bool {
    signals.iter().any(|s| s.starts_with(prefix))
}

#[test]
fn factual_signals_and_confidence() {
    let c = with_taylor();
    // A pattern decides: confidence 1.0.
    let out = c.classify("Taylor's KTN");
    assert!(has(&out.signals, "possessive_identifier"), "{out:?}");
    assert!(has(&out.signals, "known_name:taylor"), "{out:?}");
    assert_eq!(out.confidence, 1.0);
    let out = c.classify("Alex's phone number");
    assert!(has(&out.signals, "possessive_identifier"), "{out:?}");
    assert!(
        !has(&out.signals, "known_name"),
        "Alex is not in the alias map"
    );
    assert_eq!(out.confidence, 1.0);
    let out = c.classify("What is John's passport?");
    assert!(has(&out.signals, "what_is_possessive"), "{out:?}");
    assert!(has(&out.signals, "possessive_identifier"), "{out:?}");
    assert_eq!(out.confidence, 1.0);
    // "what's X's ..." counts as "what is X's ...".
    assert!(has(
        &c.classify("what's Alex's address").signals,
        "what_is_possessive"
    ));
    // Heuristics decide: 0.7.
    let out = c.classify("Taylor birthday");
    assert!(has(&out.signals, "known_name:taylor"), "{out:?}");
    assert!(has(&out.signals, "short_known_name"), "{out:?}");
    assert!(has(&out.signals, "identifier_keyword:birthday"), "{out:?}");
    assert_eq!(out.confidence, 0.7);
    for (q, kw) in [
        ("passport number", "identifier_keyword:passport"),
        ("SSN", "identifier_keyword:ssn"),
        ("phone number", "identifier_keyword:phone"),
        ("email address", "identifier_keyword:email"),
    ] {
        let out = c.classify(q);
        assert!(has(&out.signals, kw), "{q}: {out:?}");
        assert_eq!(out.confidence, 0.7, "{q}");
    }
}

#[test]
fn known_name_needs_the_alias_map() {
    // Without Taylor in the alias map, "Taylor birthday" is still factual (identifier keyword in a
    // short query) but no name signal fires.
    let out = RuleClassifier::default().classify("Taylor birthday");
    assert_eq!(out.kind, QueryKind::Factual);
    assert!(!has(&out.signals, "known_name"));
    // Aliases resolve to canonical names; each word of a canonical name is known.
    let c = RuleClassifier::builder()
        .alias("Tay", "Taylor Smith")
        .build()
        .unwrap();
    assert_eq!(c.known_names("when is tay's flight"), ["Taylor Smith"]);
    assert_eq!(c.known_names("Smith's visa"), ["Taylor Smith"]);
    assert!(c.known_names("nobody here").is_empty());
    let out = c.classify("Smith flight");
    assert!(has(&out.signals, "short_known_name"), "{out:?}");
    assert_eq!(out.kind, QueryKind::Factual);
}

#[test]
fn semantic_signals_beyond_the_first() {
    let c = with_taylor();
    let out = c.classify("what files discuss the Q4 budget");
    assert!(has(&out.signals, "discovery_word:discuss"), "{out:?}");
    let out = c.classify("summarize my notes about the project");
    assert!(has(&out.signals, "discovery_word:notes"), "{out:?}");
    assert!(has(&out.signals, "discovery_word:about"), "{out:?}");
    // "account" is an identifier keyword, but the query is not short.
    let out = c.classify("brief me on the Johnson account");
    assert!(!has(&out.signals, "identifier_keyword"), "{out:?}");
}

#[test]
fn semantic_even_when_the_person_is_known() {
    // A known name (factual heuristic) ties with an action verb; a 6-word query is not short,
    // so the tie goes to semantic.
    let c = RuleClassifier::builder()
        .alias("Sarah", "Sarah Connor")
        .alias("Johnson", "Bill Johnson")
        .build()
        .unwrap();
    for q in [
        "prepare me for meeting with Sarah",
        "brief me on the Johnson account",
    ] {
        let out = c.classify(q);
        assert_eq!(out.kind, QueryKind::Semantic, "{q}: {out:?}");
        assert!(has(&out.signals, "known_name"), "{q}: {out:?}");
    }
}

#[test]
fn possessive_identifier_beats_an_action_verb() {
    let out = RuleClassifier::default().classify("show me Taylor's passport");
    assert_eq!(out.kind, QueryKind::Factual, "{out:?}");
    assert!(has(&out.signals, "action_verb:show"));
    assert_eq!(out.confidence, 1.0);
}

#[test]
fn ambiguous_queries_default_by_length() {
    let c = RuleClassifier::default();
    let out = c.classify("quarterly budget");
    assert_eq!(out.kind, QueryKind::Factual);
    assert!(has(&out.signals, "default_factual"));
    assert_eq!(out.confidence, 0.5);
    let out = c.classify("the quarterly budget of the marketing team");
    assert_eq!(out.kind, QueryKind::Semantic);
    assert!(has(&out.signals, "default_semantic"));
    assert_eq!(out.confidence, 0.5);
}

#[test]
fn clarification_when_nothing_searchable_or_a_dangling_reference() {
    let c = RuleClassifier::default();
    for q in [
        "what is it?",
        "tell me more",
        "and that?",
        "can you do this for me",
        "???",
    ] {
        let out = c.classify(q);
        assert_eq!(out.intent, Intent::Clarification, "{q}: {out:?}");
    }
    assert!(has(
        &c.classify("what is it?").signals,
        "nothing_searchable"
    ));
    for q in [
        "what did you mean by the second point",
        "expand on the previous answer",
        "what about that one",
    ] {
        let out = c.classify(q);
        assert_eq!(out.intent, Intent::Clarification, "{q}: {out:?}");
        assert!(has(&out.signals, "back_reference"), "{q}: {out:?}");
        assert_eq!(out.confidence, 1.0);
    }
    // With the earlier turn given, it is a follow-up search.
    let out = c.classify_with_history("expand on the previous answer", &["Taylor's KTN"]);
    assert_eq!(out.intent, Intent::KnowledgeSearch);
    assert!(has(&out.signals, "follow_up"));
}

#[test]
fn off_topic_needs_a_domain() {
    let c = RuleClassifier::builder()
        .domain_corpus([
            "The Companies Act 2006 sets out directors' duties.",
            "Insolvency proceedings and the duties of liquidators.",
        ])
        .build()
        .unwrap();
    let out = c.classify("who won the football match yesterday");
    assert_eq!(out.intent, Intent::OffTopic, "{out:?}");
    assert!(has(&out.signals, "off_topic"));
    // Stemming: "director duty" matches "directors' duties".
    assert_eq!(c.classify("director duty").intent, Intent::KnowledgeSearch);
    assert_eq!(
        c.classify("summarize the liquidation of companies").intent,
        Intent::KnowledgeSearch
    );
    // A vocabulary list works the same way.
    let c = RuleClassifier::builder()
        .domain_vocabulary(["flight", "hotel", "visa"])
        .build()
        .unwrap();
    assert_eq!(
        c.classify("hotels in Paris").intent,
        Intent::KnowledgeSearch
    );
    assert_eq!(c.classify("recipe for pancakes").intent, Intent::OffTopic);
    // Without a domain nothing is off-topic.
    assert_eq!(
        RuleClassifier::default()
            .classify("recipe for pancakes")
            .intent,
        Intent::KnowledgeSearch
    );
}

#[test]
fn complex_routes() {
    let c = RuleClassifier::default();
    let out = c.classify("duties under the Companies Act 2006 and the Insolvency Act 1986");
    assert_eq!(out.route, Route::Complex, "{out:?}");
    assert!(has(&out.signals, "multiple_acts"));
    let out = c.classify("what do sections 3, 4 and 5 require");
    assert_eq!(out.route, Route::Complex, "{out:?}");
    assert!(has(&out.signals, "multiple_sections"));
    let out = c.classify("section 3 and section 7 and s. 12(1) on notice");
    assert_eq!(out.route, Route::Complex, "{out:?}");
    let out = c.classify("fair use rulings in California and New York");
    assert_eq!(out.route, Route::Complex, "{out:?}");
    assert!(has(&out.signals, "multiple_jurisdictions"));
    let out = c.classify("Supreme Court and Court of Appeal rulings on adverse possession");
    assert_eq!(out.route, Route::Complex, "{out:?}");
    // Cities that seat courts count as jurisdictions; a city inside a court's name is that
    // court, once.
    let out = c.classify("bail conditions in Delhi and Mumbai");
    assert_eq!(out.route, Route::Complex, "{out:?}");
    assert_eq!(out.legal.jurisdictions, ["delhi", "mumbai"]);
    let out = c.classify("bail rulings of the Delhi High Court");
    assert_eq!(out.legal.jurisdictions, ["delhi high court"]);

    // One act, two sections, one court: not complex.
    for q in [
        "the Companies Act 2006 on directors",
        "the Companies Act and the companies act again",
        "sections 3 and 4 on notice",
        "Supreme Court rulings on adverse possession",
        "bail rulings of the Delhi High Court",
        "Taylor's KTN",
    ] {
        let out = c.classify(q);
        assert_eq!(out.route, Route::Standard, "{q}: {out:?}");
    }
}

#[test]
fn every_list_is_configurable() {
    // Identifier keywords.
    let c = RuleClassifier::builder()
        .add_identifier_keywords(["vin"])
        .build()
        .unwrap();
    assert!(has(
        &c.classify("car vin").signals,
        "identifier_keyword:vin"
    ));
    let c = RuleClassifier::builder()
        .identifier_keywords(["badge"])
        .build()
        .unwrap();
    assert!(!has(
        &c.classify("Alex's phone").signals,
        "possessive_identifier"
    ));
    assert!(has(
        &c.classify("Alex's badge").signals,
        "possessive_identifier"
    ));
    // Action verbs and discovery words.
    let c = RuleClassifier::builder()
        .action_verbs(["outline"])
        .discovery_words(["memos"])
        .build()
        .unwrap();
    assert_eq!(c.classify("outline budget").kind, QueryKind::Semantic);
    assert_eq!(c.classify("budget memos").kind, QueryKind::Semantic);
    assert_eq!(c.classify("summarize budget").kind, QueryKind::Factual);
    // Act and section patterns.
    let c = RuleClassifier::builder()
        .act_pattern(r"\b(GDPR|CCPA|HIPAA)\b")
        .section_pattern(r"(?i)\bart(?:icle)?\.?\s*\d+")
        .build()
        .unwrap();
    assert_eq!(c.classify("GDPR versus CCPA consent").route, Route::Complex);
    assert_eq!(
        c.classify("art. 6 art. 7 and article 9").route,
        Route::Complex
    );
    // Thresholds.
    let c = RuleClassifier::builder()
        .short_query_words(2)
        .build()
        .unwrap();
    assert_eq!(
        c.classify("passport number please now").kind,
        QueryKind::Semantic
    );
    // A whole config from JSON, with defaults for what it leaves out.
    let config: RuleConfig = serde_json::from_str(
        r#"{"aliases": {"tay": "Taylor Smith"}, "identifier_keywords": ["ktn"]}"#,
    )
    .unwrap();
    assert_eq!(config.action_verbs, RuleConfig::default().action_verbs);
    let c = RuleClassifier::new(config).unwrap();
    assert!(has(&c.classify("tay KTN").signals, "short_known_name"));
    assert!(serde_json::from_str::<RuleConfig>(r#"{"nope": 1}"#).is_err());
}

#[test]
fn aliases_file() {
    let dir = std::env::temp_dir().join(format!("rerank-aliases-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("aliases.json");
    std::fs::write(&path, r#"{"tay": "Taylor Smith", "bob": "Robert Jones"}"#).unwrap();
    let aliases = rerank::classify::read_aliases(&path).unwrap();
    let expected: BTreeMap<String, String> = [
        ("tay".to_string(), "Taylor Smith".to_string()),
        ("bob".to_string(), "Robert Jones".to_string()),
    ]
    .into_iter()
    .collect();
    assert_eq!(aliases, expected);
    std::fs::write(&path, r#"["tay"]"#).unwrap();
    let e = rerank::classify::read_aliases(&path).unwrap_err();
    assert!(e.to_string().contains("aliases"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn classifier_is_shareable() {
    fn assert_send_sync<T: Send + Sync + 'static>() {}
    assert_send_sync::<RuleClassifier>();
    let c = std::sync::Arc::new(with_taylor());
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let c = c.clone();
            std::thread::spawn(move || c.classify("Taylor's KTN").kind)
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap(), QueryKind::Factual);
    }
}

#[test]
fn json_shape_is_snake_case() {
    let out = with_taylor().classify("compare Taylor's passport and visa");
    let v = serde_json::to_value(&out).unwrap();
    assert_eq!(v["kind"], "factual");
    assert_eq!(v["intent"], "knowledge_search");
    assert_eq!(v["route"], "analytical");
    assert_eq!(v["task_type"], "general");
    assert!(v["signals"].is_array());
}
