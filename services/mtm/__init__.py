"""The MTM worker: files evicted pages into topic segments, tracks heat, promotes, evicts."""
