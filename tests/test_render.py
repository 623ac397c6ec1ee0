"""grpolab.render, the one document renderer: escaping, tables, figures and lead paragraphs in HTML and
Markdown. That the audit page and mechanism.md are rendered by it: test_audit.py, test_mechanism.py."""

from __future__ import annotations

import pandas as pd
import pytest

from grpolab.render import Section, render_html, render_markdown

pytestmark = pytest.mark.fast


def _section() -> Section:
    table = pd.DataFrame({"name": ["a|b", "<i>"], "value": ["1.5%", "n/a"]})
    return Section("Cells & pipes", ["x < y & z"], tables=[("", table), ("Captioned", table)],
                   figures=[("fig_one", "A <figure>", b"\x89PNG")], notes=["careful"])


def test_html_escapes_text_and_captions_only_what_has_a_caption() -> None:
    page = render_html([_section()], "T & U", intro=["lead <p>"])
    assert "<title>T &amp; U</title>" in page and "<h1>T &amp; U</h1><p>lead &lt;p&gt;</p><nav>" in page
    assert "<p>x &lt; y &amp; z</p>" in page and '<p class="note">careful</p>' in page
    assert page.count('<div class="table-wrap"><table><thead>') == 1
    assert page.count('<div class="table-wrap"><table><caption>Captioned</caption><thead>') == 1
    assert '<td class="text">&lt;i&gt;</td><td>n/a</td>' in page  # words left-aligned, numbers right
    assert 'id="fig-fig_one" src="data:image/png;base64,iVBORw==">' in page and 'alt="A &lt;figure&gt;"' in page


@pytest.mark.parametrize(("figure_dir", "link"), [("figures", "(figures/fig_one.png)"), ("", "(fig_one.png)")])
def test_markdown_escapes_pipes_and_links_figures(figure_dir: str, link: str) -> None:
    text = render_markdown([_section()], "T", figure_dir, intro=["lead"])
    assert text.startswith("# T\n\nlead\n\n## Cells & pipes\n\nx < y & z\n\n> **Note:** careful\n\n| name | value |")
    assert text.count("| a\\|b | 1.5% |") == 2 and "**Captioned**\n\n| name |" in text
    assert f"![A <figure>]{link}\n\n*A <figure>*\n" in text
