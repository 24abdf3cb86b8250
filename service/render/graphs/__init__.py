"""Each level graph drawn: nodes as boxes (view), laid out by Graphviz (svg), and Model Explorer's node data."""
