"""The model code shipped with outputs (copied by __file__, named in auto_map: keep the file names)."""
