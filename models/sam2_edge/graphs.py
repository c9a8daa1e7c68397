"""The graphs of sam2-edge under the SAM 2 graph contract (edgekit.segmentation.graphs).

Each module wraps one EdgeSAM2 method with the contract's input order, batch 1 and output
names, so the same streaming predictor (edgekit.segmentation.stream) runs sam2-edge and the official
SAM 2.1 alike; the decoder, memory-encoder and mask-prompt wrappers are SAM 2.1's own (the
methods they call have the same signatures). Contract dimensions at 256x256: S 256, C 64,
Cm 64, h = w = 16, and the memory grid hm x wm = 10 x 8 (8 rows of pooled tokens + 2 rows of
global latents per memory frame).
"""

from __future__ import annotations

import torch
from torch import nn

from edgekit.card import GraphSpec
from edgekit.models.sam2.graphs import MaskDecoderGraph, MaskPromptGraph, MemoryEncoderGraph
from edgekit.models.sam2_edge.model import EdgeSAM2
from edgekit.segmentation import graphs as contract


class ImageEncoderGraph(nn.Module):
    """image (1, 3, S, S) in [0, 1] -> image_embed, image_embed_nomem, image_pos, feat_s0, feat_s1."""

    def __init__(self, model: EdgeSAM2) -> None:
        super().__init__()
        self.model = model

    def forward(self, image: torch.Tensor) -> tuple[torch.Tensor, ...]:
        out = self.model.encode_image(image)
        return tuple(out[name] for name in contract.output_names(contract.IMAGE_ENCODER))


class MemoryAttentionGraph(nn.Module):
    """image_embed, image_pos, mem_feats (F, ...), mem_pos, mem_tpos_idx, obj_ptrs (P, C),
    obj_ptr_tpos -> pix_feat (1, C, h, w)."""

    def __init__(self, model: EdgeSAM2) -> None:
        super().__init__()
        self.model = model

    def forward(
        self,
        image_embed: torch.Tensor,
        image_pos: torch.Tensor,
        mem_feats: torch.Tensor,
        mem_pos: torch.Tensor,
        mem_tpos_idx: torch.Tensor,
        obj_ptrs: torch.Tensor,
        obj_ptr_tpos: torch.Tensor,
    ) -> torch.Tensor:
        return self.model.condition_on_memory(
            image_embed, image_pos, mem_feats, mem_pos, mem_tpos_idx, obj_ptrs[None], obj_ptr_tpos
        )


GRAPH_CLASSES: dict[str, type[nn.Module]] = {
    contract.IMAGE_ENCODER: ImageEncoderGraph,
    contract.MEMORY_ATTENTION: MemoryAttentionGraph,
    contract.MASK_DECODER: MaskDecoderGraph,
    contract.MEMORY_ENCODER: MemoryEncoderGraph,
    contract.MASK_PROMPT: MaskPromptGraph,
}


def contract_dims(model: EdgeSAM2) -> dict[str, int]:
    """The contract's symbols for this model, e.g. {"S": 256, "C": 64, "h": 16, "hm": 10, ...}."""
    cfg = model.config
    hm, wm = cfg.memory_grid
    return {
        "S": cfg.image_size,
        "C": cfg.dim,
        "Cm": cfg.mem_dim,
        "h": cfg.grid,
        "w": cfg.grid,
        "hm": hm,
        "wm": wm,
    }


def graph_modules(model: EdgeSAM2) -> dict[str, nn.Module]:
    """Every contract graph of ``model`` as an eval-mode module, by graph name."""
    model.eval()
    return {name: cls(model).eval() for name, cls in GRAPH_CLASSES.items()}


def example_inputs(
    model: EdgeSAM2, num_frames: int = 2, num_ptrs: int = 3, num_points: int = 2
) -> dict[str, dict[str, torch.Tensor]]:
    """Per graph, inputs of the contract's shapes and dtypes (F, P, N as given), seeded."""
    d = contract_dims(model)
    s, c, cm, h, hm, wm = d["S"], d["C"], d["Cm"], d["h"], d["hm"], d["wm"]
    g = torch.Generator().manual_seed(0)

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g)

    embed = rand(1, c, h, h)
    cfg = model.config
    return {
        contract.IMAGE_ENCODER: {"image": torch.rand(1, 3, s, s, generator=g)},
        contract.MEMORY_ATTENTION: {
            "image_embed": embed,
            "image_pos": rand(1, c, h, h),
            "mem_feats": rand(num_frames, cm, hm, wm),
            "mem_pos": rand(num_frames, cm, hm, wm),
            "mem_tpos_idx": torch.arange(num_frames, dtype=torch.int64) % cfg.num_maskmem,
            "obj_ptrs": rand(num_ptrs, c),
            "obj_ptr_tpos": torch.arange(num_ptrs, dtype=torch.float32) / (cfg.max_obj_ptrs - 1),
        },
        contract.MASK_DECODER: {
            "pix_feat": embed,
            "feat_s0": rand(1, c // 8, 4 * h, 4 * h),
            "feat_s1": rand(1, c // 4, 2 * h, 2 * h),
            "point_coords": torch.rand(1, num_points, 2, generator=g) * s,
            "point_labels": torch.ones(1, num_points, dtype=torch.int64),
            "mask_input": rand(1, 1, 4 * h, 4 * h),
            "has_mask_input": torch.ones(1),
        },
        contract.MEMORY_ENCODER: {
            "image_embed": embed,
            "mask_logits": rand(1, 1, 4 * h, 4 * h),
            "binarize": torch.zeros(1),
            "object_score_logits": torch.ones(1, 1),
        },
        contract.MASK_PROMPT: {"mask": (torch.rand(1, 1, s, s, generator=g) > 0.5).float()},
    }


def graph_specs(
    model: EdgeSAM2,
    include_mask_prompt: bool = True,
    examples: dict[str, dict[str, torch.Tensor]] | None = None,
) -> list[GraphSpec]:
    """The contract graphs of ``model`` as GraphSpecs (example inputs, output names, dynamic
    axes) for the exporters; ``examples`` overrides the random example inputs per graph."""
    modules = graph_modules(model)
    examples = {**example_inputs(model), **(examples or {})}
    names = contract.GRAPH_NAMES if include_mask_prompt else contract.REQUIRED_GRAPHS
    return [
        GraphSpec(
            name=name,
            module=modules[name],
            example_inputs=examples[name],
            output_names=contract.output_names(name),
            dynamic_axes=contract.DYNAMIC_AXES[name],
        )
        for name in names
    ]


def torch_graph_set(model: EdgeSAM2) -> dict:
    """The graph set of ``model`` on torch (graph name -> feeds -> outputs), for SAM2Stream."""
    from edgekit.models.sam2.graphs import TorchGraph

    return {name: TorchGraph(name, module) for name, module in graph_modules(model).items()}
