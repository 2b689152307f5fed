"""The sections a sweep adds to report.html: user text (labels, paths, messages) is escaped, never
read as markup; tables render like the report's own."""

from __future__ import annotations

from mr2.report.html import add_section
from mr2.report.tables import Cell, Table

PAGE = "<html><body>\n<h1>Class-wise disparity report</h1>\n<script>\nrun();\n</script>\n</body></html>"


def test_sections_go_before_the_script_in_order_with_user_text_escaped() -> None:
    table = Table(["method", "n"], ["left", "right"], [[Cell("a<b>", "a<b>"), Cell("3", 3)]])
    page = add_section(PAGE, "Sweep", ["Sweep **x** `y` in /tmp/<d> & co"])
    page = add_section(page, "Failed runs", [table, ["<img src=x>: exit code 2"]])
    assert page == (
        "<html><body>\n<h1>Class-wise disparity report</h1>\n"
        "<h2>Sweep</h2>\n<p>Sweep **x** `y` in /tmp/&lt;d&gt; &amp; co</p>\n"
        "<h2>Failed runs</h2>\n"
        '<div class="wide"><table>\n<thead><tr><th class="left">method</th><th class="right">n</th></tr></thead>\n'
        '<tbody>\n<tr><td class="left" data-value="a&lt;b&gt;">a&lt;b&gt;</td>'
        '<td class="right" data-value="3">3</td></tr>\n</tbody>\n</table></div>\n'
        "<ul>\n<li>&lt;img src=x&gt;: exit code 2</li>\n</ul>\n"
        "<script>\nrun();\n</script>\n</body></html>"
    )
