"""Evaluation of base and compressed models: perplexity, lm-eval tasks, speed."""
