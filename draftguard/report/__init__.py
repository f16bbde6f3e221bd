"""Views of a ``check.findings.Report``: the same findings as JSON, markdown, annotations, terminal
text and the sticky comment, so a finding reads the same wherever it is shown.

In: a ``Report`` (and, for the sticky comment, an acceptance result as its JSON dict).
Out: text only: ``json.render_json``, ``markdown.render_markdown``, ``annotations.render_annotations``,
``terminal.render_text`` (to the stream it is given), and ``comment``'s sections and sticky body.
No files, no network: the surfaces print or post what these return.
"""
