//! The memory map of a weights file behind a safe type: `models::layers::weights` maps each
//! safetensors file once, read-only, and hands the pages of a tensor back to the kernel once it
//! has converted them.

use std::fs::File;
use std::io;
use std::ops::Deref;

use memmap2::Mmap;

/// A whole file mapped read-only; its bytes are the slice it dereferences to.
pub(crate) struct FileMap(Mmap);

impl FileMap {
    /// Maps `file` read-only.
    ///
    /// As with every memory-mapped model file, the file must not be truncated or rewritten
    /// while mapped: the caller checks, when it opens it, that the file is as long as its
    /// header says, and nothing in the crate writes to it.
    pub(crate) fn open(file: &File) -> io::Result<FileMap> {
        // SAFETY: the file is mapped read-only; it must not be truncated or rewritten while
        // mapped (see above).
        unsafe { Mmap::map(file) }.map(FileMap)
    }

    /// Hands the pages of the `len` bytes at `offset` back to the kernel (`MADV_DONTNEED`; the
    /// file stays in the page cache), on Unix; elsewhere nothing.
    ///
    /// Panics when the range is not inside the map (a bug in the caller).
    pub(crate) fn release(&self, offset: usize, len: usize) {
        assert!(
            offset
                .checked_add(len)
                .is_some_and(|end| end <= self.0.len()),
            "release: a range outside the map"
        );
        #[cfg(unix)]
        // SAFETY: the range is inside the map (asserted above), a shared read-only mapping of
        // a file: after MADV_DONTNEED a later access, through any reference into the range,
        // re-reads the pages from the file, so the contents seen through the map never change;
        // this only drops resident pages (callers release what they have copied out, so they
        // do not read it again). Failure is harmless (the pages stay resident), so it is
        // ignored.
        unsafe {
            let _ = self
                .0
                .unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, offset, len);
        }
        #[cfg(not(unix))]
        let _ = (offset, len);
    }
}

impl Deref for FileMap {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.0
    }
}
