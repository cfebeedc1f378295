"""What jobs leave on disk: the LRU cap of caches, garbage collection, moving old output layouts
(the logic; the `nbl admin gc` and `migrate-outputs` commands are cli/outputs.py)."""
