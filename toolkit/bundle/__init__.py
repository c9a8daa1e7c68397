"""The bundle format: manifest, files and checksums, archives, the guard and policy a bundle must pass, how its graph meets a runtime, and the golden-set self-test."""
