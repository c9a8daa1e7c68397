"""LLMCert-B: certified bounds on the probability of counterfactually unbiased LM responses."""
