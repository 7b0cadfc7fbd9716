"""Reference pages generated at build time from the code (settings models, typer app, OpenAPI schema):
docs/hooks.py puts each where its page says `<!-- generated: NAME -->`, so none is ever kept by hand."""
