"""An input model: loaded from a local folder, the Hub or a GGUF file, and what is refused before any weight is read."""
