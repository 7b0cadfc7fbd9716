"""Reference pages generated at build time from the code (settings models, typer app, OpenAPI schema):
docs/hooks.py puts each where its page says `<!-- generated: NAME -->`, so none is ever kept by hand."""


def cell(text: object) -> str:
    """Text for one Markdown table cell: on one line, its pipes escaped."""
    return " ".join(str(text).replace("|", "\\|").split())
