"""The `nbl` command line: the entry point (main.py) and one module per group of commands. Heavy
modules (torch, the worker) are imported inside the command that needs them."""
