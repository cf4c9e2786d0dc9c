"""The hardware abstraction layer: robot protocol and safety gate, resource leases, drivers (gymnasium)."""
