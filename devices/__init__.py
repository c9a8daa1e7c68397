"""Device profiles and cameras."""
