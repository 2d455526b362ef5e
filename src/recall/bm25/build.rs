//! Bulk indexing: a batch is cut into segments of documents, each analyzed on its own thread
//! into local term ids and postings; segments are merged into the index in order, one group
//! while the next group is analyzed, so slots follow the batch order exactly as if the
//! documents had been added one by one.

use std::borrow::Cow;

use rayon::prelude::*;

use super::FastMap;
use crate::text::Analyzer;
use crate::Document;

/// Documents per segment, at most: fewer segments repeat less work per distinct token.
const SEGMENT_DOCS: usize = 16 * 1024;

/// Documents per segment, at least (below it a batch is one segment).
const MIN_SEGMENT_DOCS: usize = 1024;

/// Strings interned to dense ids `0, 1, ...`: the bytes in one arena, a hash table of ids, so
/// a new string costs no allocation of its own and dropping the table frees a few blocks.
#[derive(Default)]
pub(crate) struct Interner {
    arena: String,
    /// End of each string in `arena` (it starts where the previous one ends).
    ends: Vec<u32>,
    table: hashbrown::HashTable<u32>,
    hasher: foldhash::fast::FixedState,
}

impl Interner {
    fn hash(&self, s: &str) -> u64 {
        use std::hash::BuildHasher;
        self.hasher.hash_one(s)
    }

    /// The string of `id`.
    pub(crate) fn get(&self, id: u32) -> &str {
        let i = id as usize;
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        &self.arena[start..self.ends[i] as usize]
    }

    /// Number of strings.
    pub(crate) fn len(&self) -> usize {
        self.ends.len()
    }

    /// The strings in id order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &str> {
        (0..self.ends.len() as u32).map(|i| self.get(i))
    }

    /// The id of `s`, and whether it is new.
    fn intern(&mut self, s: &str) -> (u32, bool) {
        let hash = self.hash(s);
        let Interner {
            arena,
            ends,
            table,
            hasher,
        } = self;
        let lookup = |id: &u32| {
            let i = *id as usize;
            let start = if i == 0 { 0 } else { ends[i - 1] as usize };
            &arena[start..ends[i] as usize] == s
        };
        if let Some(&id) = table.find(hash, lookup) {
            return (id, false);
        }
        let id = ends.len() as u32;
        arena.push_str(s);
        ends.push(arena.len() as u32);
        let (arena, ends) = (&*arena, &*ends);
        table.insert_unique(hash, id, |&id| {
            use std::hash::BuildHasher;
            let i = id as usize;
            let start = if i == 0 { 0 } else { ends[i - 1] as usize };
            hasher.hash_one(&arena[start..ends[i] as usize])
        });
        (id, true)
    }
}

/// One analyzed run of documents.
pub(super) struct Segment {
    /// The documents, in batch order.
    pub(super) docs: Vec<Document>,
    /// Their analysis.
    pub(super) analyzed: Analyzed,
}

/// The analysis of a run of documents: lengths, local term ids and postings.
pub(crate) struct Analyzed {
    /// Analyzed length of each document.
    pub(crate) lengths: Vec<u32>,
    /// The run's terms, by local id.
    pub(crate) terms: Interner,
    /// Where each local term's postings start in `postings` (one more entry at the end).
    pub(crate) offsets: Vec<u32>,
    /// (document index in the run, term frequency), grouped by local term, each group in
    /// document order.
    pub(crate) postings: Vec<(u32, u32)>,
}

impl Analyzed {
    /// The postings of local term `t`.
    #[cfg(any(feature = "sqlite", test))]
    pub(crate) fn postings_of(&self, t: usize) -> &[(u32, u32)] {
        &self.postings[self.offsets[t] as usize..self.offsets[t + 1] as usize]
    }
}

/// `docs` with only the last document of each id, in order.
pub(super) fn last_of_each_id(docs: Vec<Document>) -> Vec<Document> {
    let mut last: FastMap<&str, usize> = FastMap::default();
    last.reserve(docs.len());
    for (i, d) in docs.iter().enumerate() {
        last.insert(d.id.as_str(), i);
    }
    if last.len() == docs.len() {
        return docs;
    }
    let keep: Vec<bool> = (0..docs.len())
        .map(|i| last.get(docs[i].id.as_str()) == Some(&i))
        .collect();
    drop(last);
    docs.into_iter()
        .zip(keep)
        .filter_map(|(d, k)| k.then_some(d))
        .collect()
}

/// Analyzes `docs` in parallel segments and hands them to `merge` in batch order; merging a
/// group of segments overlaps with analyzing the next group.
pub(super) fn analyze_and_merge(
    analyzer: &dyn Analyzer,
    docs: Vec<Document>,
    mut merge: impl FnMut(Segment) + Send,
) {
    let threads = rayon::current_num_threads().max(1);
    let group_len = threads * 2;
    let segment_docs = (docs.len() / (threads * 4)).clamp(MIN_SEGMENT_DOCS, SEGMENT_DOCS);
    let mut chunks: Vec<Vec<Document>> = Vec::new();
    let mut rest = docs.into_iter();
    loop {
        let chunk: Vec<Document> = rest.by_ref().take(segment_docs).collect();
        if chunk.is_empty() {
            break;
        }
        chunks.push(chunk);
    }
    let mut pending: Vec<Segment> = Vec::new();
    let mut chunks = chunks.into_iter().peekable();
    while chunks.peek().is_some() {
        let group: Vec<Vec<Document>> = chunks.by_ref().take(group_len).collect();
        let merging = std::mem::take(&mut pending);
        let merge = &mut merge;
        let ((), analyzed) = rayon::join(
            move || merging.into_iter().for_each(merge),
            || {
                group
                    .into_par_iter()
                    .map(|docs| Segment {
                        analyzed: analyze(analyzer, &docs),
                        docs,
                    })
                    .collect::<Vec<Segment>>()
            },
        );
        pending = analyzed;
    }
    pending.into_iter().for_each(merge);
}

/// A token the analyzer drops (a stopword), in a segment's token table.
const DROPPED: u32 = u32::MAX;

/// The analysis of `docs` (each `Document::full_text`): local term ids, document lengths and
/// postings.
///
/// Each distinct token of the run is mapped to its term once ([`Analyzer::term_of`]:
/// stopwords, stemming) and remembered; each occurrence then costs one lookup of the token.
/// A document's term frequencies are counted in place (the last document and the entry of
/// each local term), so no per-document sort is needed.
pub(crate) fn analyze<'d>(
    analyzer: &dyn Analyzer,
    docs: impl IntoIterator<Item = &'d Document>,
) -> Analyzed {
    // token -> its term's local id (or DROPPED), by token id
    let mut tokens = Interner::default();
    let mut token_terms: Vec<u32> = Vec::new();
    // distinct tokens may share a term ("runs", "running")
    let mut terms = Interner::default();
    // per local term: the last document that held it and its entry there
    let mut last_doc: Vec<u32> = Vec::new();
    let mut entry_of: Vec<u32> = Vec::new();
    let mut lengths = Vec::new();
    // (local term, document, tf), in document order
    let mut entries: Vec<(u32, u32, u32)> = Vec::new();
    for (i, doc) in docs.into_iter().enumerate() {
        let i = i as u32;
        let mut len = 0u32;
        let mut on_token = |token: &str| {
            let (token_id, new) = tokens.intern(token);
            let id = if new {
                let id = match analyzer.term_of(token) {
                    None => DROPPED,
                    Some(term) => {
                        let (id, new) = terms.intern(&term);
                        if new {
                            last_doc.push(u32::MAX);
                            entry_of.push(0);
                        }
                        id
                    }
                };
                token_terms.push(id);
                id
            } else {
                token_terms[token_id as usize]
            };
            if id == DROPPED {
                return;
            }
            len = len.saturating_add(1);
            let t = id as usize;
            if last_doc[t] == i {
                entries[entry_of[t] as usize].2 += 1;
            } else {
                last_doc[t] = i;
                entry_of[t] = entries.len() as u32;
                entries.push((id, i, 1));
            }
        };
        // `Document::full_text`, copied only when there is a title
        let text: Cow<'_, str> = match doc.title.as_deref() {
            Some(title) if !title.is_empty() => Cow::Owned(format!("{title} {}", doc.text)),
            _ => Cow::Borrowed(&doc.text),
        };
        analyzer.for_each_token(&text, &mut on_token);
        lengths.push(len);
    }
    drop((tokens, token_terms, last_doc, entry_of));
    let mut offsets = vec![0u32; terms.len() + 1];
    for &(t, _, _) in &entries {
        offsets[t as usize + 1] += 1;
    }
    for t in 0..terms.len() {
        offsets[t + 1] += offsets[t];
    }
    let mut next: Vec<u32> = offsets[..terms.len()].to_vec();
    let mut postings = vec![(0u32, 0u32); entries.len()];
    for (t, d, tf) in entries {
        let at = &mut next[t as usize];
        postings[*at as usize] = (d, tf);
        *at += 1;
    }
    Analyzed {
        lengths,
        terms,
        offsets,
        postings,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::text::EnglishAnalyzer;

    /// Documents with titles, stopwords, inflections, upper case and non-ASCII text.
    fn corpus(n: usize) -> Vec<Document> {
        const WORDS: [&str; 16] = [
            "The",
            "running",
            "runs",
            "RUN",
            "dogs",
            "of",
            "Café",
            "ΣΊΣΥΦΟΣ",
            "naïve",
            "x",
            "studies",
            "studying",
            "β-cells",
            "under_score",
            "42",
            "it",
        ];
        (0..n)
            .map(|i| {
                let text: Vec<&str> = (0..i % 23).map(|j| WORDS[(i * 7 + j * 5) % 16]).collect();
                let doc = Document::new(format!("d{i}"), text.join(" "));
                match i % 3 {
                    0 => doc.with_title(WORDS[i % 16]),
                    1 => doc.with_title(""),
                    _ => doc,
                }
            })
            .collect()
    }

    /// Each document's (term, tf) and length, from `Analyzer::analyze` of its full text.
    fn reference(docs: &[Document]) -> Vec<(u32, BTreeMap<String, u32>)> {
        let a = EnglishAnalyzer::default();
        docs.iter()
            .map(|d| {
                let terms = a.analyze(&d.full_text());
                let mut tf = BTreeMap::new();
                for t in &terms {
                    *tf.entry(t.clone()).or_insert(0) += 1;
                }
                (terms.len() as u32, tf)
            })
            .collect()
    }

    #[test]
    fn analysis_equals_term_counts_of_each_document() {
        let docs = corpus(500);
        let got = analyze(&EnglishAnalyzer::default(), &docs);
        let mut per_doc: Vec<(u32, BTreeMap<String, u32>)> =
            got.lengths.iter().map(|&l| (l, BTreeMap::new())).collect();
        for (t, term) in got.terms.iter().enumerate() {
            let list = got.postings_of(t);
            assert!(
                list.windows(2).all(|w| w[0].0 < w[1].0),
                "{term}: document order"
            );
            for &(d, tf) in list {
                per_doc[d as usize].1.insert(term.to_string(), tf);
            }
        }
        assert_eq!(per_doc, reference(&docs));
        // every local term is distinct
        let distinct: std::collections::HashSet<&str> = got.terms.iter().collect();
        assert_eq!(distinct.len(), got.terms.len());
    }

    #[test]
    fn segments_arrive_in_batch_order() {
        let docs = corpus(3 * MIN_SEGMENT_DOCS + 17);
        let mut seen = Vec::new();
        analyze_and_merge(&EnglishAnalyzer::default(), docs.clone(), |s| {
            assert_eq!(s.docs.len(), s.analyzed.lengths.len());
            seen.extend(s.docs);
        });
        assert_eq!(seen, docs);
    }
}
