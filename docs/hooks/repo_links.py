"""MkDocs hook: links from a page to the repository's files outside ``docs/``.

The pages link to code and examples by relative path (``../shared/ackloop/evals/cases.py``),
which works where the Markdown is read in the repository. In the site such a link has no page
to go to: with ``repo_url`` set it goes to the file in the repository's browser, otherwise it
becomes the label followed by the file's path as code. A link to a file that does not exist is
a warning, so ``mkdocs build --strict`` fails on it as on any broken link.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import Files
from mkdocs.structure.pages import Page

log = logging.getLogger("mkdocs.hooks.repo_links")

LINK = re.compile(r"(?<!!)\[(?P<label>[^\]\n]+)\]\((?P<target>[^)\s]+)\)")
FENCE = re.compile(r"^[ \t]*(?:```|~~~)", re.MULTILINE)


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    docs = Path(config.docs_dir).resolve()
    root = Path(config.config_file_path).resolve().parent
    here = (docs / page.file.src_path).parent
    # Outside fenced code only: the text between two fence lines is code, every other piece.
    pieces = FENCE.split(markdown)
    fences = FENCE.findall(markdown)
    out = []
    for index, piece in enumerate(pieces):
        if index % 2 == 0:
            piece = LINK.sub(lambda m: _rewrite(m, here, docs, root, config, page), piece)
        out.append(piece)
        if index < len(fences):
            out.append(fences[index])
    return "".join(out)


def _rewrite(match: re.Match[str], here: Path, docs: Path, root: Path, config: MkDocsConfig,
             page: Page) -> str:
    target = match["target"]
    split = urlsplit(target)
    if split.scheme or split.netloc or not split.path or split.path.startswith("/"):
        return match[0]
    resolved = (here / split.path).resolve()
    if resolved == docs or docs in resolved.parents:
        return match[0]  # a page of the site: MkDocs checks it
    if root not in resolved.parents:
        log.warning("%s: the link %r leaves the repository", page.file.src_path, target)
        return match[0]
    if not resolved.exists():
        log.warning("%s: the link %r names no file of the repository", page.file.src_path,
                    target)
        return match[0]
    path = PurePosixPath(resolved.relative_to(root).as_posix())
    shown = f"{path}/" if resolved.is_dir() else str(path)
    label = match["label"]
    if config.repo_url:
        kind = "tree" if resolved.is_dir() else "blob"
        return f"[{label}]({config.repo_url.rstrip('/')}/{kind}/main/{path})"
    if shown.strip("/") in label:
        return label
    return f"{label} (`{shown}`)"
