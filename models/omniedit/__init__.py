"""OmniEdit at small scale: judge-curated specialist edits and the EditNet editor."""
