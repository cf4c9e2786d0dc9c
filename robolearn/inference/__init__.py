"""Policy inference for action chunks: the request/response protocol, the batching policy runner,
clients (in-process, simulated latency, remote) and the policy server process."""
