//! English default word lists and patterns for [`RuleClassifier`](super::RuleClassifier).
//!
//! Every list here is only a default: [`RuleConfig`](super::RuleConfig) holds the lists the
//! classifier actually uses, and a host replaces or extends any of them.

/// Words that name a personal identifier or a small fact about a person.
pub const IDENTIFIER_KEYWORDS: &[&str] = &[
    "passport", "ktn", "ssn", "phone", "email", "address", "birthday", "number", "id", "code",
    "pin", "account",
];

/// Verbs that ask for work over several documents (inflections match too).
pub const ACTION_VERBS: &[&str] = &[
    "prepare",
    "summarize",
    "summarise",
    "brief",
    "analyze",
    "analyse",
    "review",
    "explain",
    "describe",
    "tell",
    "help",
    "find",
    "show",
];

/// Words that ask to discover documents or topics (inflections and singulars match too).
pub const DISCOVERY_WORDS: &[&str] = &[
    "files",
    "documents",
    "notes",
    "about",
    "regarding",
    "related",
    "discuss",
    "mention",
    "contain",
    "cover",
];

/// Greetings, thanks, farewells and small talk. A query made only of these phrases (and
/// [`CHITCHAT_FILLERS`]) is chitchat.
pub const CHITCHAT_PHRASES: &[&str] = &[
    "hi",
    "hello",
    "hey",
    "hiya",
    "howdy",
    "greetings",
    "yo",
    "thanks",
    "thank you",
    "thx",
    "ty",
    "cheers",
    "much appreciated",
    "appreciate it",
    "bye",
    "goodbye",
    "good bye",
    "bye bye",
    "see you",
    "see you later",
    "see ya",
    "later",
    "take care",
    "good night",
    "good morning",
    "good afternoon",
    "good evening",
    "how are you",
    "how are you doing",
    "how's it going",
    "how is it going",
    "what's up",
    "whats up",
    "sup",
    "nice to meet you",
    "ok",
    "okay",
    "great",
    "cool",
];

/// Words that may pad a chitchat phrase ("thanks a lot", "hi there", "thank you so much").
pub const CHITCHAT_FILLERS: &[&str] = &[
    "there",
    "a",
    "lot",
    "so",
    "much",
    "very",
    "again",
    "all",
    "everyone",
    "everybody",
    "team",
    "folks",
    "guys",
    "friend",
    "buddy",
    "mate",
    "you",
    "too",
    "today",
    "and",
    "oh",
    "well",
    "then",
    "for",
    "the",
    "help",
    "your",
    "bot",
    "assistant",
];

/// Back-references to an earlier turn: without a conversation history, a query matching one of
/// these needs clarification. Case-insensitive regular expressions.
pub const BACK_REFERENCE_PATTERNS: &[&str] = &[
    r"(?i)\bwhat about (it|that|this|them|those|him|her)\b",
    r"(?i)\b(you|u) (just )?(said|mentioned|meant|told me|suggested)\b",
    r"(?i)\bwhat did you mean\b",
    r"(?i)\bas (i|you|we) (said|mentioned|discussed)\b",
    r"(?i)\b(previous|last|earlier|above|prior|former|latter) (answer|response|reply|message|result|results|question|point|one)\b",
    r"(?i)\b(the )?(first|second|third|other|next|same) one\b",
    r"(?i)\b(tell me more|go on|elaborate|say more|expand on that)\b",
];

/// Queries asking for one definition or one provision's text (route `simple`).
pub const SIMPLE_PATTERNS: &[&str] = &[
    r"(?i)^\s*define\s+\S",
    r"(?i)\bdefinition of\s+\S",
    r"(?i)\bwhat (does|do) (section|sec\.?|s\.|article|art\.|clause|rule|regulation|paragraph)\s*\S+(\s+of\s+(the\s+)?[\w'.,]+(\s+[\w'.,]+){0,5}?)?\s+(say|state|provide|mean)\b",
    r"(?i)\b(text|wording) of (section|sec\.?|s\.|article|art\.|clause|rule|regulation|paragraph)\s*\d",
    r"(?i)\bshow me (section|sec\.?|s\.|article|art\.|clause|rule|regulation|paragraph)\s*\d",
    r"(?i)^\s*what is (section|sec\.?|s\.|article|art\.|clause|rule|regulation|paragraph)\s*\d",
    r"(?i)\bread (out )?(section|sec\.?|s\.|article|art\.|clause|rule|regulation|paragraph)\s*\d",
];

/// Queries asking for comparison, evolution or an exhaustive survey (route `analytical`).
pub const ANALYTICAL_PATTERNS: &[&str] = &[
    r"(?i)\bcompar(e|es|ed|ing|ison|isons)\b",
    r"(?i)\bcontrast(s|ed|ing)?\b",
    r"(?i)\bevol(ution|ve|ves|ved|ving)\b",
    r"(?i)\btrac(e|es|ed|ing)\b",
    r"(?i)\ball grounds\b",
    r"(?i)\ball provisions\b",
    r"(?i)\bevery\b",
    r"(?i)\bcomprehensive(ly)?\b",
    r"(?i)\binterplay between\b",
    r"(?i)\brelationship between\b",
    r"(?i)\bhow (has|have|had) .+ been interpreted\b",
];

/// A reference to an act or statute. Capture group 1 names it (`Companies` in "the Companies
/// Act 2006"); two references count as different when their names differ.
pub const ACT_PATTERN: &str =
    r"(?i)\b([a-z][a-z'-]*)\s+(?:act|statute|code|ordinance)\b(?:,?\s+(?:of\s+)?(\d{4}))?";

/// A reference to one or more sections ("section 12", "s. 5(2)", "§ 7", "sections 3, 4 and 5").
/// Every number inside a match counts as one section reference.
pub const SECTION_PATTERN: &str = r"(?i)(?:\bsections?|\bsecs?\.?|\bss?\.|§§?)\s*\d+[a-z]?(?:\(\w+\))*(?:\s*(?:,|and|&|or|to)\s*\d+[a-z]?(?:\(\w+\))*)*";

/// Jurisdictions and courts: two or more different ones make a query `complex`.
/// Case-insensitive regular expressions; each distinct matched text counts once.
pub const JURISDICTION_PATTERNS: &[&str] = &[
    // A capitalized place before the court names it: "Delhi High Court" and "Bombay High
    // Court" are two courts.
    r"(?i)\b(?:(?-i:[A-Z][a-z]+)\s+)?(supreme|high|district|federal|appeals?|appellate|circuit|family|county|constitutional|crown|magistrates'?|tax|labou?r) court\b",
    r"(?i)\bcourt of (appeals?|justice|session|first instance)\b",
    r"(?i)\b(house of lords|privy council|european court of human rights|echr|cjeu)\b",
    r"(?i)\b(united states|u\.s\.|usa|united kingdom|uk|england|wales|scotland|northern ireland|ireland|european union|eu|india|canada|australia|new zealand|singapore|hong kong|south africa|germany|france)\b",
    r"(?i)\b(california|new york|texas|delaware|florida|illinois|ontario|quebec|british columbia|new south wales|victoria)\b",
    // Cities that seat courts: "bail in Delhi and Mumbai" names two jurisdictions.
    r"(?i)\b(delhi|mumbai|bombay|kolkata|calcutta|chennai|madras|bengaluru|bangalore|hyderabad|allahabad|lucknow|london|edinburgh|dublin|toronto|sydney|melbourne|chicago|los angeles|san francisco)\b",
];

/// Short names of acts and the names the act pattern gives them (compared case-insensitively,
/// as whole words).
pub const ACT_ABBREVIATIONS: &[(&str, &str)] = &[
    ("IPC", "penal code"),
    ("CrPC", "criminal procedure code"),
    ("CPC", "civil procedure code"),
    ("GDPR", "general data protection regulation"),
];

/// Words that point at building or configuring something.
pub const IMPLEMENTATION_WORDS: &[&str] = &[
    "implement",
    "implementation",
    "build",
    "create",
    "write",
    "code",
    "configure",
    "configuration",
    "install",
    "set up",
    "setup",
    "deploy",
    "integrate",
    "add",
    "example",
    "how to",
    "how do i",
    "how can i",
    "api",
    "function",
    "script",
];

/// Words that point at fixing something broken.
pub const TROUBLESHOOTING_WORDS: &[&str] = &[
    "error",
    "errors",
    "exception",
    "fail",
    "fails",
    "failed",
    "failing",
    "failure",
    "crash",
    "crashes",
    "crashed",
    "bug",
    "broken",
    "fix",
    "debug",
    "traceback",
    "stack trace",
    "panic",
    "not working",
    "doesn't work",
    "does not work",
    "timeout",
    "timed out",
    "issue",
    "problem",
    "wrong",
    "segfault",
];

/// Words that point at architecture and design choices.
pub const DESIGN_WORDS: &[&str] = &[
    "design",
    "architecture",
    "architect",
    "pattern",
    "patterns",
    "trade-off",
    "tradeoff",
    "tradeoffs",
    "trade-offs",
    "scalable",
    "scalability",
    "structure",
    "approach",
    "best practice",
    "best practices",
    "should i use",
    "versus",
    "vs",
    "choose between",
    "pros and cons",
];
