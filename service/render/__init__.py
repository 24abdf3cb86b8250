"""Renderers: the CLI text, the report page, the SVG charts."""
