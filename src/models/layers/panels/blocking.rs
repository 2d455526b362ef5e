//! The block sizes of the panel products, chosen from the data caches this CPU reports (read
//! once, from Linux's `/sys/devices/system/cpu/cpu0/cache`), not fixed for one CPU.
//!
//! Two sizes depend on the caches:
//! - `kc`, the columns of `k` per packed block: a panel's block (`kc x NR` floats) takes half
//!   of the level-1 data cache, the other half holding the left operand's rows as they stream
//!   past: 256 columns (16 KB) with a 32 KB or larger level-1 cache, fewer with a smaller one.
//! - `nc`, the columns per group of panels: the outputs of one block of rows in one group
//!   (`BLOCK_ROWS x nc` floats) take at most 40% of the level-2 cache, so they stay there
//!   across the blocks of `k`: 1024 columns (384 KB) with 1 MB or more (AMD Zen 4, Intel
//!   Sapphire Rapids), 512 with Zen 3's 512 KB, where 1024 columns' outputs (384 KB, 75% of
//!   the cache) were evicted by the rows and panels streaming through.
//!
//! The sizes are capped at the values the kernels were tuned with on a 1 MB level-2 cache
//! (Zen 4): a larger cache keeps them, so the figures measured there and on Sapphire Rapids
//! hold. Where the caches cannot be read, a 32 KB level-1 and 1 MB level-2 cache are assumed
//! (the same sizes as before they were read). The blocking changes how a product walks its
//! operands; `kc` also changes where its sums over `k` are split (each block's sum is added
//! to the output), so a different `kc` moves results by float rounding, and `nc` by nothing.

use std::sync::OnceLock;

use super::BLOCK_ROWS;
use crate::simd::panels::NR;

/// A panel product's block sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Blocking {
    /// Columns of `k` per packed block (an even number).
    pub kc: usize,
    /// Columns per group of panels (a multiple of `NR`).
    pub nc: usize,
}

/// The largest `kc`, what a 32 KB level-1 data cache gives.
const MAX_KC: usize = 256;
/// The largest `nc`, what a 1 MB level-2 cache gives.
const MAX_NC: usize = 1024;

impl Blocking {
    /// The block sizes for these cache sizes (bytes), for blocks of `block_rows` rows.
    pub fn for_caches(l1d: usize, l2: usize, block_rows: usize) -> Blocking {
        let floats = std::mem::size_of::<f32>();
        let kc = (l1d / 2 / (NR * floats)) / 16 * 16;
        let outputs = l2 * 2 / 5 / (block_rows.max(1) * floats);
        // A power of two of panels: the groups split the common widths (384, 1536, 3072)
        // into equal parts.
        let nc = if outputs >= NR {
            1 << outputs.ilog2()
        } else {
            NR
        };
        Blocking {
            kc: kc.clamp(32, MAX_KC),
            nc: nc.clamp(4 * NR, MAX_NC),
        }
    }

    /// The block sizes for this CPU, for blocks of `BLOCK_ROWS` rows: computed once, the
    /// caches read once.
    pub fn detect() -> Blocking {
        static BLOCKING: OnceLock<Blocking> = OnceLock::new();
        *BLOCKING.get_or_init(|| {
            let (l1d, l2) = data_caches().unwrap_or((32 << 10, 1 << 20));
            Blocking::for_caches(l1d, l2, BLOCK_ROWS)
        })
    }
}

/// The level-1 data and level-2 cache sizes of the first CPU, in bytes, as Linux reports
/// them; `None` elsewhere or when they cannot be read.
fn data_caches() -> Option<(usize, usize)> {
    let dir = std::path::Path::new("/sys/devices/system/cpu/cpu0/cache");
    let (mut l1d, mut l2) = (None, None);
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let read = |name: &str| std::fs::read_to_string(entry.path().join(name)).ok();
        let (Some(level), Some(kind), Some(size)) = (read("level"), read("type"), read("size"))
        else {
            continue;
        };
        let size = parse_size(size.trim());
        match (level.trim(), kind.trim()) {
            ("1", "Data") => l1d = size,
            ("2", "Unified" | "Data") => l2 = size,
            _ => {}
        }
    }
    Some((l1d?, l2?))
}

/// `"48K"`, `"2048K"`, `"2M"` or a plain number of bytes.
fn parse_size(text: &str) -> Option<usize> {
    let (digits, unit) = match text.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => text.split_at(i),
        None => (text, ""),
    };
    let n: usize = digits.parse().ok()?;
    let scale = match unit {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        _ => return None,
    };
    n.checked_mul(scale).filter(|&bytes| bytes > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_follow_the_caches_and_keep_the_tuned_values_on_large_ones() {
        // (L1 bytes, L2 bytes, the sizes).
        let cases = [
            // Zen 4 (32 KB, 1 MB) and Sapphire Rapids (48 KB, 2 MB): the tuned sizes.
            (32 << 10, 1 << 20, (256, 1024)),
            (48 << 10, 2 << 20, (256, 1024)),
            // Zen 3 (32 KB, 512 KB): half the groups' columns.
            (32 << 10, 512 << 10, (256, 512)),
            // Small caches: smaller blocks, never below the floors.
            (16 << 10, 256 << 10, (128, 256)),
            (1, 1, (32, 64)),
        ];
        for (l1, l2, (kc, nc)) in cases {
            assert_eq!(
                Blocking::for_caches(l1, l2, 96),
                Blocking { kc, nc },
                "{l1} {l2}"
            );
        }
        let b = Blocking::detect();
        assert!(b.kc.is_multiple_of(2) && b.nc.is_multiple_of(NR), "{b:?}");
    }

    #[test]
    fn cache_sizes_parse_as_linux_writes_them() {
        assert_eq!(parse_size("48K"), Some(48 << 10));
        assert_eq!(parse_size("2M"), Some(2 << 20));
        assert_eq!(parse_size("512"), Some(512));
        assert_eq!(parse_size("0K"), None);
        assert_eq!(parse_size("12Q"), None);
        assert_eq!(parse_size(""), None);
    }
}
