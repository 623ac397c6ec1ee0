"""The one document renderer: a list of ``Section``s to a self-contained HTML page and to Markdown.

Every written document goes through here: the ``grpolab compare`` report (``grpolab.report``), the
``grpolab audit --html`` page (``grpolab.audit.render``) and ``mechanism.md`` (``grpolab.mechanism.render``).
A document is a title, optional lead paragraphs (``intro``) and sections; a section holds plain text
(escaped for HTML, ``|`` escaped in Markdown table cells), so the commands build content, never markup.

The HTML page has inline CSS, figures as base64 PNG ``<img>`` (``max-width: 100%``), tables inside a
horizontally scrolling wrapper, no script and no external resource, so it can be mailed or archived as one
file. The Markdown links figures as ``figure_dir/<stem>.png`` (the caller writes the PNGs). ``screenshot``
renders a page with headless Chromium (``apt-get install -y chromium``).
"""

from __future__ import annotations

import base64
import html
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from grpolab.errors import UserError

_NUMERIC = re.compile(r"^([-+\[]?[\d.]|n/a|inf|-inf)")


@dataclass
class Section:
    """One document section, rendered in this order: heading, paragraphs, notes, tables, bullets, figures and
    a code block (all plain text). A table's caption may be empty (then none is shown)."""

    title: str
    paragraphs: list[str] = field(default_factory=list)
    tables: list[tuple[str, pd.DataFrame]] = field(default_factory=list)  # (caption, table)
    figures: list[tuple[str, str, bytes]] = field(default_factory=list)  # (file stem, caption, PNG bytes)
    bullets: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    code: str | None = None


CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;max-width:1180px;
margin:0 auto;padding:1.5rem;color:#1d232a;line-height:1.5}
h1{font-size:1.7rem;margin-bottom:.2rem}
h2{border-bottom:1px solid #d0d7de;padding-bottom:.25rem;margin-top:2.2rem}
figure{margin:1rem 0}figure img{max-width:100%;height:auto;display:block;border:1px solid #eaeef2}
figcaption{font-size:.9rem;color:#57606a;margin-top:.3rem}
.table-wrap{overflow-x:auto;max-width:100%;margin:.6rem 0}
table{border-collapse:collapse;font-size:.85rem;white-space:nowrap}
caption{text-align:left;font-weight:600;padding:.3rem 0}
th,td{border:1px solid #d0d7de;padding:.25rem .5rem;text-align:right}th{background:#f6f8fa}
td.text,th.text{text-align:left}
.note{background:#fff8c5;border-left:4px solid #d4a72c;padding:.4rem .8rem}
pre{background:#f6f8fa;padding:.8rem;overflow-x:auto;font-size:.85rem}
"""


def _slug(title: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in title.lower()).strip("-")


def _html_table(caption: str, frame: pd.DataFrame) -> str:
    """A scrollable table; columns of numbers (or n/a) right-aligned, columns of words left-aligned."""
    text = [not all(_NUMERIC.match(str(v)) for v in frame[c]) for c in frame.columns]
    align = [' class="text"' if is_text else "" for is_text in text]
    head = "".join(f"<th{a}>{html.escape(str(c))}</th>" for a, c in zip(align, frame.columns, strict=True))
    body = "".join(
        "<tr>" + "".join(f"<td{a}>{html.escape(str(v))}</td>" for a, v in zip(align, row, strict=True)) + "</tr>"
        for row in frame.itertuples(index=False)
    )
    caption_row = f"<caption>{html.escape(caption)}</caption>" if caption else ""
    return (
        f'<div class="table-wrap"><table>{caption_row}'
        f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"
    )


def _html_section(section: Section) -> str:
    parts = [f'<section id="{_slug(section.title)}"><h2>{html.escape(section.title)}</h2>']
    parts += [f"<p>{html.escape(p)}</p>" for p in section.paragraphs]
    parts += [f'<p class="note">{html.escape(n)}</p>' for n in section.notes]
    parts += [_html_table(caption, frame) for caption, frame in section.tables]
    if section.bullets:
        parts.append("<ul>" + "".join(f"<li>{html.escape(b)}</li>" for b in section.bullets) + "</ul>")
    for stem, caption, png in section.figures:
        data = base64.b64encode(png).decode("ascii")
        parts.append(
            f'<figure><img alt="{html.escape(caption)}" id="fig-{stem}" src="data:image/png;base64,'
            f'{data}"><figcaption>{html.escape(caption)}</figcaption></figure>'
        )
    if section.code is not None:
        parts.append(f"<pre>{html.escape(section.code)}</pre>")
    return "\n".join(parts) + "</section>"


def render_html(sections: list[Section], title: str, *, intro: Sequence[str] = ()) -> str:
    """One self-contained HTML page: inline CSS, base64 PNG figures, no script, no external resource.

    ``intro``: paragraphs between the title and the table of contents."""
    lead = "".join(f"<p>{html.escape(p)}</p>" for p in intro)
    toc = " · ".join(f'<a href="#{_slug(s.title)}">{html.escape(s.title)}</a>' for s in sections)
    body = "\n".join(_html_section(s) for s in sections)
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>"
        f"<h1>{html.escape(title)}</h1>{lead}<nav>{toc}</nav>\n{body}\n</body></html>\n"
    )


def _md_table(caption: str, frame: pd.DataFrame) -> str:
    def cell(value: Any) -> str:
        return str(value).replace("|", "\\|")

    lines = [f"**{caption}**", ""] if caption else []
    lines += [
        "| " + " | ".join(cell(c) for c in frame.columns) + " |",
        "|" + "---|" * len(frame.columns),
    ]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join(lines)


def render_markdown(
    sections: list[Section], title: str, figure_dir: str = "figures", *, intro: Sequence[str] = ()
) -> str:
    """Markdown version: the same text and tables, figures linked as ``figure_dir/<stem>.png`` (``<stem>.png``
    when ``figure_dir`` is empty). ``intro``: paragraphs between the title and the first section."""
    prefix = f"{figure_dir}/" if figure_dir else ""
    parts = [f"# {title}", *intro]
    for section in sections:
        parts.append(f"## {section.title}")
        parts += section.paragraphs
        parts += [f"> **Note:** {n}" for n in section.notes]
        parts += [_md_table(caption, frame) for caption, frame in section.tables]
        if section.bullets:
            parts.append("\n".join(f"- {b}" for b in section.bullets))
        parts += [f"![{caption}]({prefix}{stem}.png)\n\n*{caption}*" for stem, caption, _ in section.figures]
        if section.code is not None:
            parts.append(f"```json\n{section.code}\n```")
    return "\n\n".join(parts) + "\n"


def chromium_command(*args: str, width: int = 1280, height: int = 2400) -> list[str]:
    """Headless Chromium command line (no network, throwaway profile); raises UserError if not installed."""
    binary = next(
        (shutil.which(name) for name in ("chromium", "chromium-browser", "google-chrome") if shutil.which(name)),
        None,
    )
    if binary is None:
        raise UserError("chromium is not installed: run `apt-get install -y chromium` (Debian/Ubuntu)")
    profile = tempfile.mkdtemp(prefix="grpolab-chromium-")
    return [
        binary,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
        f"--window-size={width},{height}",
        *args,
    ]


def screenshot(
    html_path: Path, png_path: Path, *, width: int = 1280, height: int = 2400, timeout: float = 120.0
) -> Path:
    """Render ``html_path`` with headless Chromium into ``png_path`` (width x height pixels)."""
    png_path = Path(png_path).resolve()
    png_path.parent.mkdir(parents=True, exist_ok=True)
    command = chromium_command(
        f"--screenshot={png_path}", Path(html_path).resolve().as_uri(), width=width, height=height
    )
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0 or not png_path.is_file():
        raise RuntimeError(f"chromium screenshot failed (exit {done.returncode}): {done.stderr[-2000:]}")
    return png_path
