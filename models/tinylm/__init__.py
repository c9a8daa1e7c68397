"""A tiny causal LM over MiniLM's WordPiece vocabulary and the interface its users decode through,
shared by the sdlg, con_j, llmcert_b and agents_room models."""
