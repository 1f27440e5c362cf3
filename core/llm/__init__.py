"""The one LLM HTTP client (I/O): one retry policy, one deadline, one size cap."""
