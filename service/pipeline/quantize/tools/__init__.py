"""Artifacts made outside the three paths: other tools in a subprocess (``tool_paths``: NNCF, ModelOpt, Quark;
their scripts in ``runners/``, a folder of scripts, not a package, run by each tool's interpreter) and the
files users bring beside the model (``brought``)."""
