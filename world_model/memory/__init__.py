"""Context providers of the geodesic world model: the prototype pool (macro level, prototypes.py)
and the recent trajectory window (texture level, window.py)."""
