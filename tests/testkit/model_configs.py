"""config.json files of known shapes, written by the tests (no weights), and a Hub that serves them."""

from __future__ import annotations

import json
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

LLAMA_70B = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 8192,
    "num_hidden_layers": 80,
    "intermediate_size": 28672,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "torch_dtype": "bfloat16",
    "tie_word_embeddings": False,
}
LLAMA_8B = {
    **LLAMA_70B,
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
}
TINY = {
    **LLAMA_70B,
    "hidden_size": 64,
    "num_hidden_layers": 4,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 128,
    "max_position_embeddings": 256,
}
HUGE = {**LLAMA_70B, "hidden_size": 65536, "num_attention_heads": 512}  # its sums alone: 172 GB a layer
# mixtures of experts, as their public config.json give them (the numbers that size them; docs/sizing.md)
QWEN3_235B_A22B = {
    "architectures": ["Qwen3MoeForCausalLM"],
    "model_type": "qwen3_moe",
    "hidden_size": 4096,
    "num_hidden_layers": 94,
    "intermediate_size": 12288,
    "num_attention_heads": 64,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "attention_bias": False,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "moe_intermediate_size": 1536,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "norm_topk_prob": True,
    "vocab_size": 151936,
    "max_position_embeddings": 40960,
    "torch_dtype": "bfloat16",
    "tie_word_embeddings": False,
}
MIXTRAL_8X22B = {
    "architectures": ["MixtralForCausalLM"],
    "model_type": "mixtral",
    "hidden_size": 6144,
    "num_hidden_layers": 56,
    "intermediate_size": 16384,
    "num_attention_heads": 48,
    "num_key_value_heads": 8,
    "num_local_experts": 8,
    "num_experts_per_tok": 2,
    "vocab_size": 32768,
    "max_position_embeddings": 65536,
    "torch_dtype": "bfloat16",
    "tie_word_embeddings": False,
}


def write_config(directory: Path, config: dict) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config))
    return directory


@contextmanager
def hub_serving(files: dict[str, bytes], authorizations: list | None = None):
    """A stand-in for the Hub's file endpoint (GET /{repo}/resolve/{revision}/config.json), the one call the
    estimate makes: yields its URL, for HF_ENDPOINT. `files`: repo id -> the bytes of its config.json;
    `authorizations` collects each request's Authorization header (None when it had none)."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            if authorizations is not None:
                authorizations.append(self.headers.get("Authorization"))
            repo, sep, _ = self.path.lstrip("/").partition("/resolve/")
            body = files.get(repo) if sep and self.path.endswith("/config.json") else None
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Length", str(len(body or b"")))
            self.end_headers()
            self.wfile.write(body or b"")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
