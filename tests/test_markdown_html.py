"""The reports' Markdown rendered as HTML (shardopt.leaderboard.markdown_html)."""

from shardopt.leaderboard.markdown_html import markdown_html


def test_tables_headings_paragraphs_and_inline_spans():
    md = ("# Title\n\nSome `code` and **bold** <text>.\nSecond line.\n\n"
          "| solver | ms |\n| --- | --- |\n| greedy | 1.25 |\n| a|b | x |\n\nAfter.")
    page = markdown_html(md)
    assert page.startswith("<h2>Title</h2>")
    assert "<p>Some <code>code</code> and <strong>bold</strong> &lt;text&gt;. Second line.</p>" in page
    assert "<thead><tr><th>solver</th><th>ms</th></tr></thead>" in page
    assert "<tr><td>greedy</td><td class='num'>1.25</td></tr>" in page
    assert page.endswith("<p>After.</p>") and "|" not in page.replace("<td>a</td>", "")
