#!/usr/bin/env python3
"""Writes the small PDFs under tests/data/pdf/ that the PDF ingestion tests read.

They are made by a real PDF writer (fpdf2), so ingestion is tested on the kind of file a user
has: text drawn with a standard font, several pages, and one page that is only an image (a
"scanned" document without a text layer).

    python3 -m venv "${RERANK_PDF_VENV:-.venv-pdf}"
    "${RERANK_PDF_VENV:-.venv-pdf}/bin/pip" install fpdf2
    "${RERANK_PDF_VENV:-.venv-pdf}/bin/python" scripts/make_test_pdfs.py

The files are committed; run this again only to change them (and update the tests).
"""

import io
import os

from fpdf import FPDF
from PIL import Image, ImageDraw

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "pdf")

HANDBOOK = [
    [
        "Annual leave.",
        "Employees accrue 25 days of paid annual leave per calendar year. Leave must be "
        "requested in the HR portal at least two weeks in advance. Up to five unused days may "
        "be carried over to the next year; carried-over days expire on 31 March.",
    ],
    [
        "Sick leave.",
        "Sick leave is paid in full for up to 10 days per year. From the third consecutive day "
        "of sickness a doctor's note is required.",
    ],
    [
        "Remote work.",
        "Remote work is allowed up to three days per week with the manager's approval. Core "
        "hours are 10:00 to 15:00. Home office equipment up to 500 euros is reimbursed once "
        "every three years against receipts.",
    ],
]


def fixed(pdf: FPDF) -> FPDF:
    # Fixed metadata, so the files are the same on every run.
    pdf.set_creation_date(__import__("datetime").datetime(2024, 1, 1))
    pdf.set_producer("fpdf2 (scripts/make_test_pdfs.py)")
    return pdf


def text_pdf(path: str, pages) -> None:
    pdf = fixed(FPDF())
    pdf.set_font("Helvetica", size=12)
    for paragraphs in pages:
        pdf.add_page()
        for p in paragraphs:
            pdf.multi_cell(0, 8, p)
            pdf.ln(2)
    pdf.output(path)


def scanned_pdf(path: str) -> None:
    # An image of text, no text layer: what a scanner without OCR writes.
    img = Image.new("L", (600, 200), 255)
    draw = ImageDraw.Draw(img)
    draw.rectangle([20, 20, 580, 180], outline=0, width=3)
    draw.text((40, 90), "Expense policy (scanned)", fill=0)
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    pdf = fixed(FPDF())
    pdf.add_page()
    pdf.image(buf, x=10, y=10, w=180)
    pdf.output(path)


def main() -> None:
    os.makedirs(OUT, exist_ok=True)
    text_pdf(os.path.join(OUT, "handbook.pdf"), HANDBOOK)
    text_pdf(
        os.path.join(OUT, "memo.pdf"),
        [["Office memo.", "The office is closed on 24 December. Deliveries go to the back door."]],
    )
    scanned_pdf(os.path.join(OUT, "scanned.pdf"))


if __name__ == "__main__":
    main()
