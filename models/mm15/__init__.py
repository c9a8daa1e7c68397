"""MM1.5 recipe in miniature: image splitting, coordinates as text, staged data-mixture training."""
