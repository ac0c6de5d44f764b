"""`memoryd http`: memoryd as a versioned HTTP API with server-sent events."""
