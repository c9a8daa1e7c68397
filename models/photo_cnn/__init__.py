"""photo-cnn: a compact CNN trained in-repo on crops of scikit-image photos (net, data, train, card)."""
