"""The graph worker: entities and bi-temporal relations extracted from turns and memories."""
