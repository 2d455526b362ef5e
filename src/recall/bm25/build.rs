//! Bulk indexing: a batch is cut into segments of documents, each analyzed on its own thread
//! into local term ids and postings; segments are merged into the index in order, one group
//! while the next group is analyzed, so slots follow the batch order exactly as if the
//! documents had been added one by one.

use rayon::prelude::*;

use super::FastMap;
use crate::text::Analyzer;
use crate::Document;

/// Documents per segment.
const SEGMENT_DOCS: usize = 4096;

/// One analyzed run of documents.
pub(super) struct Segment {
    /// The documents, in batch order.
    pub(super) docs: Vec<Document>,
    /// Analyzed length of each document.
    pub(super) lengths: Vec<u32>,
    /// The segment's terms, by local id.
    pub(super) terms: Vec<String>,
    /// Where each local term's postings start in `postings` (one more entry at the end).
    pub(super) offsets: Vec<u32>,
    /// (document index in the segment, term frequency), grouped by local term, each group in
    /// document order.
    pub(super) postings: Vec<(u32, u32)>,
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
    let group_len = (rayon::current_num_threads() * 4).max(1);
    let mut chunks: Vec<Vec<Document>> = Vec::new();
    let mut rest = docs.into_iter();
    loop {
        let chunk: Vec<Document> = rest.by_ref().take(SEGMENT_DOCS).collect();
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
                    .map(|docs| analyze(analyzer, docs))
                    .collect::<Vec<Segment>>()
            },
        );
        pending = analyzed;
    }
    pending.into_iter().for_each(merge);
}

/// One segment: local term ids, document lengths and postings.
fn analyze(analyzer: &dyn Analyzer, docs: Vec<Document>) -> Segment {
    let mut local: FastMap<String, u32> = FastMap::default();
    local.reserve(8 * 1024);
    let mut lengths = Vec::with_capacity(docs.len());
    let mut ids: Vec<u32> = Vec::new();
    // (local term, document, tf), in document order, then grouped by term (stable)
    let mut entries: Vec<(u32, u32, u32)> = Vec::new();
    for (i, doc) in docs.iter().enumerate() {
        ids.clear();
        analyzer.for_each_term(&doc.full_text(), &mut |term| {
            let id = match local.get(term) {
                Some(&id) => id,
                None => {
                    let id = local.len() as u32;
                    local.insert(term.to_string(), id);
                    id
                }
            };
            ids.push(id);
        });
        lengths.push(u32::try_from(ids.len()).unwrap_or(u32::MAX));
        ids.sort_unstable();
        let mut run = 0;
        while run < ids.len() {
            let id = ids[run];
            let end = run + ids[run..].iter().take_while(|&&x| x == id).count();
            entries.push((id, i as u32, (end - run) as u32));
            run = end;
        }
    }
    let mut offsets = vec![0u32; local.len() + 1];
    for &(t, _, _) in &entries {
        offsets[t as usize + 1] += 1;
    }
    for t in 0..local.len() {
        offsets[t + 1] += offsets[t];
    }
    let mut next: Vec<u32> = offsets[..local.len()].to_vec();
    let mut postings = vec![(0u32, 0u32); entries.len()];
    for (t, d, tf) in entries {
        let at = &mut next[t as usize];
        postings[*at as usize] = (d, tf);
        *at += 1;
    }
    let mut terms = vec![String::new(); local.len()];
    for (term, id) in local {
        terms[id as usize] = term;
    }
    Segment {
        docs,
        lengths,
        terms,
        offsets,
        postings,
    }
}
