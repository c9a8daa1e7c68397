"""WLKS: Weisfeiler-Lehman kernels for subgraphs, on induced k-hop neighbourhoods (k = 0 and k = D)."""
