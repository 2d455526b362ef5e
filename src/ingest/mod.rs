//! Ingestion: documents from files, for a corpus to index.
//!
//! - [`Chunker`] (`chunk`): sentence-aware chunks of a size (characters or tokens) with an
//!   overlap;
//! - [`pdf_documents`] and [`pdf_dir_documents`] (`pdf`, feature `pdf`): the text of each PDF
//!   page, chunked into documents `{id: "{file}_p{page}_c{n}", source: file, page}`.

mod chunk;
#[cfg(feature = "pdf")]
mod pdf;

pub use chunk::{ChunkUnit, Chunker};
#[cfg(feature = "pdf")]
pub use pdf::{pdf_dir_documents, pdf_documents, pdf_pages};
