"""Past one machine: Ray fan-out of bench and eval, cluster nodes, Ray Serve."""
