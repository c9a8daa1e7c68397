"""Lens: closed-loop camera sensor control with VisiT, its baselines, benchmark, captures, setting prior, diagnostics and reports."""
