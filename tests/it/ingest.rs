//! PDF ingestion on small real PDFs (tests/data/pdf, written by fpdf2 through
//! scripts/make_test_pdfs.py).

use std::path::{Path, PathBuf};

use rerank::ingest::{pdf_dir_documents, pdf_documents, pdf_pages, ChunkUnit, Chunker};
use rerank::Error;

fn pdf(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/pdf")
        .join(name)
}

#[test]
fn every_page_of_a_multi_page_pdf_has_its_text() {
    let pages = pdf_pages(pdf("handbook.pdf")).unwrap();
    assert_eq!(pages.len(), 3);
    assert_eq!(pages.iter().map(|(n, _)| *n).collect::<Vec<_>>(), [1, 2, 3]);
    assert!(
        pages[0].1.contains("25 days of paid annual leave"),
        "{}",
        pages[0].1
    );
    assert!(pages[1].1.contains("doctor's note"), "{}", pages[1].1);
    assert!(pages[2].1.contains("500 euros"), "{}", pages[2].1);
}

#[test]
fn chunks_are_documents_with_file_page_and_number() {
    let chunker = Chunker::new(20, 6, ChunkUnit::Tokens).unwrap();
    let docs = pdf_documents(pdf("handbook.pdf"), &chunker).unwrap();
    assert!(docs.len() > 3, "{}", docs.len());
    assert_eq!(docs[0].id, "handbook_p1_c1");
    assert!(docs.iter().any(|d| d.id == "handbook_p1_c2"));
    for d in &docs {
        assert_eq!(d.source.as_deref(), Some("handbook.pdf"));
        let page = d.page.unwrap();
        assert!(d.id.starts_with(&format!("handbook_p{page}_c")), "{}", d.id);
        assert!(d.text.split_whitespace().count() <= 20, "{}", d.text);
    }
    // The chunks of a page cover its text: every sentence is in one of them.
    let page1 = &pdf_pages(pdf("handbook.pdf")).unwrap()[0].1;
    for sentence in rerank::text::split_sentences(page1) {
        assert!(
            docs.iter()
                .any(|d| d.page == Some(1) && d.text.contains(&sentence)),
            "{sentence}"
        );
    }
}

#[test]
fn a_pdf_without_a_text_layer_is_a_clear_error() {
    let e = pdf_documents(pdf("scanned.pdf"), &Chunker::default()).unwrap_err();
    assert!(matches!(e, Error::InvalidInput(_)), "{e:?}");
    assert!(e.to_string().contains("no text layer"), "{e}");
    assert!(e.to_string().contains("scanned.pdf"), "{e}");
    // The directory holds it too: ingestion stops with its name.
    let e = pdf_dir_documents(pdf(""), &Chunker::default()).unwrap_err();
    assert!(e.to_string().contains("scanned.pdf"), "{e}");
    assert!(pdf_pages(pdf("no-such.pdf")).is_err());
}

#[test]
fn the_corpus_feeds_a_pipeline() {
    let docs = pdf_documents(pdf("memo.pdf"), &Chunker::default()).unwrap();
    assert_eq!(docs.len(), 1);
    assert_eq!(docs[0].id, "memo_p1_c1");
    let index = rerank::Bm25Index::new();
    index.add(docs).unwrap();
    let p = rerank::Pipeline::builder()
        .retriever(index)
        .build()
        .unwrap();
    let a = p.answer("When is the office closed?").unwrap();
    assert!(a.text.contains("[Source: memo.pdf, Page 1]"), "{}", a.text);
}

/// `rerank ingest --pdf DIR --out FILE` writes the documents the library makes from the
/// folder (same ids, texts, sources and pages, in order), and a folder holding a PDF without
/// a text layer fails naming it and writes nothing.
#[test]
fn the_cli_writes_the_corpus_the_library_makes() {
    let Some(cli) = crate::common::rerank_cli() else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("rerank-ingest-cli-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let pdfs = dir.join("pdfs");
    std::fs::create_dir_all(&pdfs).unwrap();
    for name in ["handbook.pdf", "memo.pdf"] {
        std::fs::copy(pdf(name), pdfs.join(name)).unwrap();
    }
    let out = dir.join("corpus.jsonl");
    let run = |pdfs: &Path, out: &Path| {
        std::process::Command::new(&cli)
            .args(["ingest", "--pdf"])
            .arg(pdfs)
            .arg("--out")
            .arg(out)
            .args(["--size", "300", "--overlap", "50"])
            .output()
            .unwrap()
    };
    let done = run(&pdfs, &out);
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    let written = rerank::Document::read_jsonl(&out).unwrap();
    let chunker = Chunker::new(300, 50, ChunkUnit::Chars).unwrap();
    let want = pdf_dir_documents(&pdfs, &chunker).unwrap();
    assert!(written.len() > 2, "{}", written.len());
    assert_eq!(written.len(), want.len());
    for (w, d) in written.iter().zip(&want) {
        assert_eq!(
            (&w.id, &w.text, &w.source, w.page),
            (&d.id, &d.text, &d.source, d.page)
        );
    }
    // The shared folder also holds scanned.pdf: refused by name, nothing written.
    let refused = dir.join("refused.jsonl");
    let failed = run(&pdf(""), &refused);
    assert!(!failed.status.success());
    assert!(String::from_utf8_lossy(&failed.stderr).contains("scanned.pdf"));
    assert!(!refused.exists());
    let _ = std::fs::remove_dir_all(&dir);
}
