"""The indexer worker: every retrievable item embedded and kept in the hybrid search index."""
