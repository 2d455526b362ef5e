#!/usr/bin/env python3
"""Write BGE-M3's two extra heads as safetensors, beside the PyTorch files the hub publishes.

BAAI/bge-m3 (and fine-tunes saved by FlagEmbedding) keep, beside the XLM-RoBERTa encoder, two
heads saved with `torch.save(linear.state_dict())`:

  sparse_linear.pt   Linear(hidden, 1): the learned sparse (lexical) weight of each token
  colbert_linear.pt  Linear(hidden, colbert_dim): the ColBERT (multi-vector) projection

The crate reads safetensors only, so this script writes `sparse_linear.safetensors` and
`colbert_linear.safetensors` (the same tensors, `weight` and `bias`, in their stored dtype)
beside them. `rerank::embed::SparseEncoder` and `ColbertEncoder` then load the folder.

Each state dict must be exactly a Linear layer's: `weight` (2-D) and, as FlagEmbedding saves
it, `bias` (1-D, one value per output). The files are read with `torch.load(..., weights_only=True)`, so no code in them runs.
A head whose `.safetensors` already holds the same tensors is left alone.

Usage (needs torch and safetensors):
    python scripts/convert_bge_m3_heads.py MODEL_DIR
"""
import sys
from pathlib import Path

HEADS = ["sparse_linear", "colbert_linear"]


def read_state_dict(path: Path):
    """The `weight` (and `bias`, if any) of a Linear layer's state dict saved at `path`."""
    import torch

    state = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(state, dict) or sorted(state) not in (["bias", "weight"], ["weight"]):
        keys = sorted(state) if isinstance(state, dict) else type(state).__name__
        raise SystemExit(f"{path}: expected a Linear layer's state dict (weight, bias), got {keys}")
    weight, bias = state["weight"], state.get("bias")
    if weight.dim() != 2 or (bias is not None and tuple(bias.shape) != (weight.shape[0],)):
        shapes = f"weight {tuple(weight.shape)}" + ("" if bias is None else f", bias {tuple(bias.shape)}")
        raise SystemExit(f"{path}: {shapes}: not a Linear layer's (out, in) and (out,)")
    tensors = {"weight": weight.contiguous()}
    if bias is not None:
        tensors["bias"] = bias.contiguous()
    return tensors


def same(path: Path, tensors) -> bool:
    """Whether the safetensors file at `path` already holds `tensors`."""
    from safetensors.torch import load_file

    if not path.is_file():
        return False
    stored = load_file(str(path))
    return sorted(stored) == sorted(tensors) and all(
        stored[k].dtype == v.dtype and stored[k].shape == v.shape and bool((stored[k] == v).all())
        for k, v in tensors.items())


def convert(folder: Path) -> list[Path]:
    """Writes the safetensors of every head `folder` has; returns the files written or kept."""
    from safetensors.torch import save_file

    done = []
    for head in HEADS:
        source = folder / f"{head}.pt"
        if not source.is_file():
            continue
        tensors = read_state_dict(source)
        target = folder / f"{head}.safetensors"
        if same(target, tensors):
            print(f"{target}: already converted")
        else:
            save_file(tensors, str(target), metadata={"format": "pt"})
            shapes = {k: tuple(v.shape) for k, v in tensors.items()}
            print(f"{target}: {shapes}")
        done.append(target)
    if not done:
        raise SystemExit(f"{folder}: neither {HEADS[0]}.pt nor {HEADS[1]}.pt (is it a BGE-M3 folder?)")
    return done


def main():
    if len(sys.argv) != 2:
        raise SystemExit("usage: python scripts/convert_bge_m3_heads.py MODEL_DIR")
    convert(Path(sys.argv[1]))


if __name__ == "__main__":
    main()
