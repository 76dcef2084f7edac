"""The reports' Markdown as HTML: headings, paragraphs, pipe tables and inline code / bold, which is all the
leaderboard writers produce. A report page is read in a browser: its tables must be tables, not Markdown text in a
<pre> block (what the measured report used to show). No Markdown package is a dependency of this project, and the
subset here is the reports' own, so a converter of a few dozen lines is what it takes.
"""

from __future__ import annotations

import html
import re

_CODE = re.compile(r"`([^`]+)`")
_BOLD = re.compile(r"\*\*([^*]+)\*\*")


def inline(text: str) -> str:
    """Escaped text with `code` and **bold** spans."""
    out = html.escape(text)
    out = _CODE.sub(lambda m: f"<code>{m.group(1)}</code>", out)
    return _BOLD.sub(lambda m: f"<strong>{m.group(1)}</strong>", out)


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _is_rule(line: str) -> bool:
    return bool(re.fullmatch(r"\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?", line.strip()))


def markdown_html(md: str) -> str:
    """HTML of the reports' Markdown: `#` headings, blank-line separated paragraphs, pipe tables (numbers
    right-aligned), inline code and bold."""
    lines = md.splitlines()
    out: list[str] = []
    para: list[str] = []

    def flush() -> None:
        if para:
            out.append("<p>" + inline(" ".join(para)) + "</p>")
            para.clear()

    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            flush()
            i += 1
            continue
        m = re.match(r"(#{1,6})\s+(.*)", line)
        if m:
            flush()
            level = min(6, len(m.group(1)) + 1)  # the page's own title is the h1
            out.append(f"<h{level}>{inline(m.group(2))}</h{level}>")
            i += 1
            continue
        if line.lstrip().startswith("|") and i + 1 < len(lines) and _is_rule(lines[i + 1]):
            flush()
            head = _cells(line)
            rows = []
            i += 2
            while i < len(lines) and lines[i].lstrip().startswith("|"):
                rows.append(_cells(lines[i]))
                i += 1
            out.append("<table><thead><tr>" + "".join(f"<th>{inline(h)}</th>" for h in head) + "</tr></thead><tbody>")
            for row in rows:
                cells = "".join(
                    f"<td class='num'>{inline(c)}</td>" if re.match(r"^[-+]?[\d.,]+", c) else f"<td>{inline(c)}</td>" for c in row)
                out.append(f"<tr>{cells}</tr>")
            out.append("</tbody></table>")
            continue
        para.append(line.strip())
        i += 1
    flush()
    return "\n".join(out)
