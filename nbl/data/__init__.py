"""The data a job reads: dataset names refused, the shipped offline sets, heal's share, task files."""
