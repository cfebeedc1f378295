"""Outputs written once more, quantized by llm-compressor in its own venv (issue 39): quantize.py."""
