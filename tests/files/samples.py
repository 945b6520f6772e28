"""Small real files made in the test: a PDF written object by object (with its cross-reference
table), a PNG drawn with Pillow."""

from __future__ import annotations

import io


def pdf(pages: list[str]) -> bytes:
    """A PDF of one page per string, each showing its string in Helvetica."""
    count = len(pages)
    page_ids = [3 + 2 * i for i in range(count)]
    font_id = 3 + 2 * count
    objects: dict[int, bytes] = {
        1: b"<< /Type /Catalog /Pages 2 0 R >>",
        2: (b"<< /Type /Pages /Kids [" + b" ".join(b"%d 0 R" % p for p in page_ids)
            + b"] /Count %d >>" % count),
        font_id: b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    }
    for page_id, text in zip(page_ids, pages, strict=True):
        escaped = text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
        stream = b"BT /F1 24 Tf 72 720 Td (" + escaped.encode("latin-1") + b") Tj ET"
        objects[page_id] = (b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
                            b"/Resources << /Font << /F1 %d 0 R >> >> /Contents %d 0 R >>"
                            % (font_id, page_id + 1))
        objects[page_id + 1] = (b"<< /Length %d >>\nstream\n" % len(stream) + stream
                                + b"\nendstream")
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets: dict[int, int] = {}
    for number in sorted(objects):
        offsets[number] = len(out)
        out += b"%d 0 obj\n" % number + objects[number] + b"\nendobj\n"
    xref = len(out)
    size = max(objects) + 1
    out += b"xref\n0 %d\n0000000000 65535 f \n" % size
    for number in range(1, size):
        out += b"%010d 00000 n \n" % offsets[number]
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (size, xref)
    return bytes(out)


def png(width: int, height: int) -> bytes:
    """A PNG of ``width`` x ``height`` pixels (a gradient, so it does not compress to nothing)."""
    from PIL import Image

    image = Image.new("RGB", (width, height))
    image.putdata([((x * 7) % 256, (y * 11) % 256, (x * y) % 256)
                   for y in range(height) for x in range(width)])
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()
