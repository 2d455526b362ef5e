//! PDF files to per-page text and chunked documents (feature `pdf`, with `lopdf`).

use std::path::{Path, PathBuf};

use super::Chunker;
use crate::{Document, Error, Result};

/// The text of each page of the PDF at `path`, in page order (1-based page numbers).
pub fn pdf_pages(path: impl AsRef<Path>) -> Result<Vec<(u32, String)>> {
    let path = path.as_ref();
    let doc = lopdf::Document::load(path)
        .map_err(|e| Error::parse(format!("PDF {}", path.display()), e.to_string()))?;
    let pages = doc.get_pages();
    let mut out = Vec::with_capacity(pages.len());
    for number in pages.keys() {
        // A page without text (an image) gives an empty string, not an error.
        let text = doc.extract_text(&[*number]).unwrap_or_default();
        out.push((*number, normalize(&text)));
    }
    Ok(out)
}

/// Whitespace collapsed, hyphenated line breaks joined.
fn normalize(text: &str) -> String {
    let joined = text.replace("-\n", "");
    joined.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The documents of one PDF: each page's text cut by `chunker`, with ids
/// `"{file stem}_p{page}_c{n}"` (`n` from 1 on each page), `source` the file name and `page`
/// the page number. A PDF with no text on any page (a scanned document without a text layer)
/// is an error that says so.
pub fn pdf_documents(path: impl AsRef<Path>, chunker: &Chunker) -> Result<Vec<Document>> {
    let path = path.as_ref();
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stem = path
        .file_stem()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut docs = Vec::new();
    for (page, text) in pdf_pages(path)? {
        for (i, chunk) in chunker.chunk(&text).into_iter().enumerate() {
            docs.push(
                Document::new(format!("{stem}_p{page}_c{}", i + 1), chunk)
                    .with_source(name.clone())
                    .with_page(page),
            );
        }
    }
    if docs.is_empty() {
        return Err(Error::InvalidInput(format!(
            "{}: no text layer (no page has extractable text; a scanned PDF needs OCR first)",
            path.display()
        )));
    }
    Ok(docs)
}

/// The documents of every `*.pdf` file in `dir` (not recursive), files in name order; the
/// first file that fails stops the ingestion with its error.
pub fn pdf_dir_documents(dir: impl AsRef<Path>, chunker: &Chunker) -> Result<Vec<Document>> {
    let dir = dir.as_ref();
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| Error::io(dir, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e.eq_ignore_ascii_case("pdf")))
        .collect();
    files.sort();
    let mut docs = Vec::new();
    for f in files {
        docs.extend(pdf_documents(&f, chunker)?);
    }
    Ok(docs)
}
