"""What jobs leave on disk: the LRU cap of caches, garbage collection, moving old output layouts."""
