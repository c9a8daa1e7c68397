"""SAE polysemy (PS-Eval): sparse autoencoders on MiniLM activations and the polysemy benchmark."""
