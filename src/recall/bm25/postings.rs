//! One term's postings, compressed: blocks of 128 (slot, term frequency) pairs, slots
//! delta-encoded and both bit-packed (the `bitpacking` crate: SIMD where the CPU has it), each
//! block with the (tf, length) pairs that can reach its best score; the last, unfilled block
//! stays plain until it fills.

use bitpacking::{BitPacker, BitPacker4x};

/// Postings per block.
pub(crate) const BLOCK: usize = BitPacker4x::BLOCK_LEN;

/// Where one full block lives and what bounds its scores.
#[derive(Debug, Clone, Copy)]
struct BlockMeta {
    /// The highest slot in the block.
    last: u32,
    /// Byte offset of the block's slots in `data` (its term frequencies follow).
    offset: u32,
    /// Start of the block's impacts in `impacts` (they end where the next block's start).
    impacts: u32,
    /// Bits per slot delta.
    doc_bits: u8,
    /// Bits per `tf - 1`.
    tf_bits: u8,
}

/// A term's postings in slot order.
#[derive(Debug, Default, Clone)]
pub(crate) struct PostingList {
    blocks: Vec<BlockMeta>,
    /// Per block, the (tf, document length) pairs no other posting of the block dominates
    /// (higher or equal tf and shorter or equal length): BM25 grows with tf and falls with
    /// length, so the block's best score is the best over these pairs, whatever the collection
    /// statistics are at query time (Lucene's "competitive impacts").
    impacts: Vec<(u32, u32)>,
    data: Vec<u8>,
    /// The postings after the last full block, plain.
    tail: Vec<(u32, u32)>,
}

impl PostingList {
    /// Appends a posting; `slot` is above every slot already held. `lengths` gives the
    /// analyzed length of every slot (for the block's impacts).
    pub(crate) fn push(&mut self, slot: u32, tf: u32, lengths: &[u32]) {
        self.tail.push((slot, tf));
        if self.tail.len() == BLOCK {
            self.seal(lengths);
        }
    }

    /// Compresses the full tail into a block.
    fn seal(&mut self, lengths: &[u32]) {
        let packer = BitPacker4x::new();
        let mut docs = [0u32; BLOCK];
        let mut tfs = [0u32; BLOCK];
        for (i, &(slot, tf)) in self.tail.iter().enumerate() {
            docs[i] = slot;
            tfs[i] = tf - 1;
        }
        let initial = self.blocks.last().map(|b| b.last);
        let doc_bits = packer.num_bits_strictly_sorted(initial, &docs);
        let tf_bits = packer.num_bits(&tfs);
        let offset = self.data.len();
        let need = BitPacker4x::compressed_block_size(doc_bits)
            + BitPacker4x::compressed_block_size(tf_bits);
        self.data.resize(offset + need, 0);
        let n = packer.compress_strictly_sorted(initial, &docs, &mut self.data[offset..], doc_bits);
        packer.compress(&tfs, &mut self.data[offset + n..], tf_bits);
        let impacts = self.impacts.len() as u32;
        let mut pairs = [(0u32, 0u32); BLOCK];
        for (pair, &(slot, tf)) in pairs.iter_mut().zip(&self.tail) {
            *pair = (tf, lengths[slot as usize]);
        }
        push_frontier(&mut pairs, &mut self.impacts);
        self.blocks.push(BlockMeta {
            last: docs[BLOCK - 1],
            offset: offset as u32,
            impacts,
            doc_bits,
            tf_bits,
        });
        self.tail.clear();
    }

    /// Number of full blocks.
    pub(crate) fn blocks(&self) -> usize {
        self.blocks.len()
    }

    /// The highest slot of block `b`.
    pub(crate) fn block_last(&self, b: usize) -> u32 {
        self.blocks[b].last
    }

    /// A lower bound of the first slot of block `b` (`b == blocks()` is the tail).
    pub(crate) fn block_first_bound(&self, b: usize) -> u32 {
        if b == 0 {
            0
        } else {
            self.blocks[b - 1].last + 1
        }
    }

    /// The impacts of block `b`.
    pub(crate) fn block_impacts(&self, b: usize) -> &[(u32, u32)] {
        let start = self.blocks[b].impacts as usize;
        let end = self
            .blocks
            .get(b + 1)
            .map_or(self.impacts.len(), |n| n.impacts as usize);
        &self.impacts[start..end]
    }

    /// The plain postings after the last block.
    pub(crate) fn tail(&self) -> &[(u32, u32)] {
        &self.tail
    }

    /// Decodes block `b` into `docs` and `tfs`.
    pub(crate) fn decode(&self, b: usize, docs: &mut [u32; BLOCK], tfs: &mut [u32; BLOCK]) {
        let meta = self.blocks[b];
        let packer = BitPacker4x::new();
        let initial = b.checked_sub(1).map(|p| self.blocks[p].last);
        let data = &self.data[meta.offset as usize..];
        let n = packer.decompress_strictly_sorted(initial, data, docs, meta.doc_bits);
        packer.decompress(&data[n..], tfs, meta.tf_bits);
        for tf in tfs.iter_mut() {
            *tf += 1;
        }
    }

    /// Every posting in slot order.
    pub(crate) fn for_each(&self, mut f: impl FnMut(u32, u32)) {
        let mut docs = [0u32; BLOCK];
        let mut tfs = [0u32; BLOCK];
        for b in 0..self.blocks.len() {
            self.decode(b, &mut docs, &mut tfs);
            for i in 0..BLOCK {
                f(docs[i], tfs[i]);
            }
        }
        for &(slot, tf) in &self.tail {
            f(slot, tf);
        }
    }

    /// Bytes held (capacity), for memory accounting.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.blocks.capacity() * std::mem::size_of::<BlockMeta>()
            + self.impacts.capacity() * 8
            + self.data.capacity()
            + self.tail.capacity() * 8
    }

    /// Releases spare capacity (after a bulk build).
    pub(crate) fn shrink(&mut self) {
        self.blocks.shrink_to_fit();
        self.impacts.shrink_to_fit();
        self.data.shrink_to_fit();
        self.tail.shrink_to_fit();
    }
}

/// Term frequencies up to this find their frontier from per-tf minimum lengths, without a sort.
const SMALL_TF: usize = 32;

/// Appends the Pareto frontier of `pairs` (tf high, length low) to `out`.
fn push_frontier(pairs: &mut [(u32, u32)], out: &mut Vec<(u32, u32)>) {
    // tf descending, then length ascending: a pair is kept when it is shorter than every pair
    // of higher tf kept before it. For small tfs that is the shortest length of each tf, taken
    // from the highest tf down.
    if pairs.iter().all(|&(tf, _)| tf as usize <= SMALL_TF) {
        let mut shortest_of = [u32::MAX; SMALL_TF + 1];
        for &(tf, len) in pairs.iter() {
            let s = &mut shortest_of[tf as usize];
            *s = (*s).min(len);
        }
        let mut shortest = u32::MAX;
        for tf in (0..=SMALL_TF).rev() {
            let len = shortest_of[tf];
            if len < shortest {
                out.push((tf as u32, len));
                shortest = len;
            }
        }
        return;
    }
    pairs.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let mut shortest = u32::MAX;
    for &(tf, len) in pairs.iter() {
        if len < shortest {
            out.push((tf, len));
            shortest = len;
        }
    }
}

/// A forward-only reader of one posting list: seeks slots in increasing order, decoding a
/// block only when a slot in it is asked for.
pub(crate) struct Cursor<'a> {
    list: &'a PostingList,
    /// Current block; `list.blocks()` means the tail.
    block: usize,
    decoded: bool,
    pos: usize,
    docs: [u32; BLOCK],
    tfs: [u32; BLOCK],
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(list: &'a PostingList) -> Self {
        Cursor {
            list,
            block: 0,
            decoded: false,
            pos: 0,
            docs: [0; BLOCK],
            tfs: [0; BLOCK],
        }
    }

    /// Moves to the block that may hold `slot` (never backwards).
    fn advance_to_block(&mut self, slot: u32) {
        let n = self.list.blocks();
        let start = self.block;
        while self.block < n && self.list.blocks[self.block].last < slot {
            self.block += 1;
        }
        if self.block != start {
            self.decoded = false;
            self.pos = 0;
        }
    }

    /// The term frequency of `slot`, if the list holds it. Slots asked for never decrease.
    pub(crate) fn seek(&mut self, slot: u32) -> Option<u32> {
        self.advance_to_block(slot);
        if self.block == self.list.blocks() {
            let tail = &self.list.tail;
            while self.pos < tail.len() && tail[self.pos].0 < slot {
                self.pos += 1;
            }
            return match tail.get(self.pos) {
                Some(&(s, tf)) if s == slot => Some(tf),
                _ => None,
            };
        }
        if !self.decoded {
            self.list.decode(self.block, &mut self.docs, &mut self.tfs);
            self.decoded = true;
        }
        while self.pos < BLOCK && self.docs[self.pos] < slot {
            self.pos += 1;
        }
        (self.pos < BLOCK && self.docs[self.pos] == slot).then(|| self.tfs[self.pos])
    }

    /// Calls `f(slot, tf)` for every posting with `from <= slot < to`, in order, and leaves
    /// the cursor at the first posting at or after `to`. Windows asked for never go backwards.
    pub(crate) fn for_range(&mut self, from: u32, to: u32, f: impl FnMut(u32, u32)) {
        self.for_range_in(from, to, |_| true, f)
    }

    /// [`Cursor::for_range`] over the full blocks `keep` accepts (asked before a block is
    /// decoded; a block already decoded, and the tail, are always read): the postings of a
    /// block it refuses are passed over, in this range only.
    pub(crate) fn for_range_in(
        &mut self,
        from: u32,
        to: u32,
        mut keep: impl FnMut(usize) -> bool,
        mut f: impl FnMut(u32, u32),
    ) {
        self.advance_to_block(from);
        loop {
            if self.block == self.list.blocks() {
                let tail = &self.list.tail;
                while self.pos < tail.len() && tail[self.pos].0 < from {
                    self.pos += 1;
                }
                while self.pos < tail.len() && tail[self.pos].0 < to {
                    f(tail[self.pos].0, tail[self.pos].1);
                    self.pos += 1;
                }
                return;
            }
            if self.list.block_first_bound(self.block) >= to {
                return;
            }
            if !self.decoded && !keep(self.block) {
                if self.list.block_last(self.block) >= to {
                    // the next range may want the block's later postings
                    return;
                }
                self.block += 1;
                self.pos = 0;
                continue;
            }
            if !self.decoded {
                self.list.decode(self.block, &mut self.docs, &mut self.tfs);
                self.decoded = true;
            }
            while self.pos < BLOCK && self.docs[self.pos] < from {
                self.pos += 1;
            }
            while self.pos < BLOCK && self.docs[self.pos] < to {
                f(self.docs[self.pos], self.tfs[self.pos]);
                self.pos += 1;
            }
            if self.pos < BLOCK {
                return;
            }
            self.block += 1;
            self.decoded = false;
            self.pos = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_through_blocks_and_tail() {
        let lengths: Vec<u32> = (0..2000).map(|i| 10 + i % 37).collect();
        let mut list = PostingList::default();
        let want: Vec<(u32, u32)> = (0..300u32).map(|i| (i * 5 + i % 3, 1 + i % 7)).collect();
        for &(s, tf) in &want {
            list.push(s, tf, &lengths);
        }
        assert_eq!(list.blocks(), 2);
        assert_eq!(list.tail().len(), 300 - 2 * BLOCK);
        let mut got = Vec::new();
        list.for_each(|s, tf| got.push((s, tf)));
        assert_eq!(got, want);
        // seeks
        let mut c = Cursor::new(&list);
        for &(s, tf) in want.iter().step_by(7) {
            assert_eq!(c.seek(s), Some(tf));
        }
        let mut c = Cursor::new(&list);
        assert_eq!(c.seek(1), None);
        assert_eq!(c.seek(want[200].0), Some(want[200].1));
        // windows
        let mut c = Cursor::new(&list);
        let mut seen = Vec::new();
        for w in (0..1600).step_by(100) {
            c.for_range(w, w + 100, |s, tf| seen.push((s, tf)));
        }
        assert_eq!(seen, want);
        // a refused block is passed over in that range only: a block that reaches past the
        // range is asked again by the next range
        let mut c = Cursor::new(&list);
        let mut got = Vec::new();
        let cut = want[64].0;
        c.for_range_in(0, cut, |b| b != 0, |s, tf| got.push((s, tf)));
        assert!(got.is_empty());
        c.for_range_in(cut, 1600, |_| true, |s, tf| got.push((s, tf)));
        assert_eq!(got, want[64..]);
        let mut c = Cursor::new(&list);
        let mut got = Vec::new();
        c.for_range_in(0, 1600, |b| b != 0, |s, tf| got.push((s, tf)));
        assert_eq!(got, want[BLOCK..]);
    }

    #[test]
    fn impacts_are_the_frontier() {
        let mut pairs = vec![(1, 10), (3, 50), (2, 5), (3, 40), (1, 4), (2, 60)];
        let mut out = Vec::new();
        push_frontier(&mut pairs, &mut out);
        assert_eq!(out, [(3, 40), (2, 5), (1, 4)]);
        // a tf above SMALL_TF takes the sorting path: the same frontier
        let mut pairs = vec![
            (40, 90),
            (3, 50),
            (2, 5),
            (40, 80),
            (1, 4),
            (33, 85),
            (1, 4),
        ];
        let mut out = Vec::new();
        push_frontier(&mut pairs, &mut out);
        assert_eq!(out, [(40, 80), (3, 50), (2, 5), (1, 4)]);
        // both paths agree on random blocks
        let mut seed = 7u64;
        for _ in 0..200 {
            let block: Vec<(u32, u32)> = (0..BLOCK)
                .map(|_| {
                    seed = seed
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    (1 + (seed >> 60) as u32 % 9, 5 + (seed >> 33) as u32 % 300)
                })
                .collect();
            let mut fast = Vec::new();
            push_frontier(&mut block.clone(), &mut fast);
            let mut sorted = block.clone();
            sorted.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
            let mut slow = Vec::new();
            let mut shortest = u32::MAX;
            for &(tf, len) in &sorted {
                if len < shortest {
                    slow.push((tf, len));
                    shortest = len;
                }
            }
            assert_eq!(fast, slow);
        }
    }
}
