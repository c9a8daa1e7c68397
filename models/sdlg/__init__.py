"""SDLG (semantically diverse language generation): uncertainty of an LM's answer from a few
likely but semantically different alternatives, scored by weighted semantic entropy."""
