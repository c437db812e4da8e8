"""MkDocs hook: render the reStructuredText left in docstrings on the API pages.

The docstrings write Sphinx roles (``:func:`name```, ``:math:`x```) and ``.. math::`` blocks, which
mkdocstrings passes through as Markdown: a role becomes ``:func:<code>name</code>`` and a math
block a paragraph ``.. math::`` followed by a code block. This hook turns them into what Sphinx
would show: cross-reference roles into code (``~a.b.C`` shown as ``C``), math roles and blocks into
MathJax input for ``pymdownx.arithmatex``. It only rewrites those exact shapes, on every page.
"""

from __future__ import annotations

import re

_REF_ROLE = re.compile(
    r":(?:py:)?(?:func|class|mod|meth|attr|data|obj|exc|const|ref|term):<code>(~?)([^<]*)</code>"
)
_MATH_ROLE = re.compile(r":math:<code>(.*?)</code>", re.DOTALL)
_MATH_BLOCK = re.compile(
    r"<p>\.\. math::</p>\s*"
    r"<div class=\"highlight\"><pre><span></span><code>(.*?)</code></pre></div>",
    re.DOTALL,
)


def _reference(match: re.Match) -> str:
    short, target = match.group(1), match.group(2)
    return f"<code>{target.rsplit('.', 1)[-1] if short else target}</code>"


def rewrite(html: str) -> str:
    """The page's HTML with the reStructuredText roles and math blocks rendered."""
    html = _MATH_BLOCK.sub(
        lambda m: f'<div class="arithmatex">\\[{m.group(1).strip()}\\]</div>', html
    )
    html = _MATH_ROLE.sub(lambda m: f'<span class="arithmatex">\\({m.group(1)}\\)</span>', html)
    return _REF_ROLE.sub(_reference, html)


def on_page_content(html: str, **kwargs) -> str:
    return rewrite(html)
