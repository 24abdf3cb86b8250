"""What people read: the CLI text, the report page, the SVG drawings."""
