"""Write a checkpoint as a plain transformers folder (config.json, safetensors, tokenizer) that vLLM can serve.

The packaged default model is a Q4_1 GGUF: transformers dequantizes it to float32 on load, and the folder written
here holds those float32 weights, so vLLM serves exactly the weights the local path scores.

    python -m pytest_modelbench.scoring.server.export_model smollm2-135m .vllm-model
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pytest_modelbench.errors import ModelbenchError
from pytest_modelbench.scoring.loading import load_model, resolve_model_source


def export(model: str, folder: Path) -> None:
    loaded = load_model(resolve_model_source(model), dtype="float32")
    # A GGUF checkpoint is dequantized on load; forget the quantizer so the float32 weights can be written.
    loaded.model.hf_quantizer = None
    loaded.model.config.__dict__.pop("quantization_config", None)
    loaded.model.save_pretrained(folder)
    loaded.tokenizer.save_pretrained(folder)
    config_path = folder / "config.json"
    config = json.loads(config_path.read_text())
    config.pop("quantization_config", None)  # the weights are dequantized already; vLLM would try to re-quantize
    config_path.write_text(json.dumps(config, indent=2))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="what --model accepts: hub id, folder, .gguf file, or the packaged default")
    parser.add_argument("folder", type=Path, help="where to write the transformers folder")
    args = parser.parse_args(argv)
    try:
        export(args.model, args.folder)
    except ModelbenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {args.folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
