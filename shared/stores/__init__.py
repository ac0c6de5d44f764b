"""Read-model stores: each owns one read model's tables and the queries others need."""
