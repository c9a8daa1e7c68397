"""BingoGuard (compact): severity-level moderation scorer on MiniLM, plus an LLM judge."""
