"""The maps refined after selection: sequential refit and healing, and the refine stage."""
