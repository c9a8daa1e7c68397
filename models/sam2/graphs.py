"""The exportable graphs of SAM 2.1 (the contract in ``edgekit.segmentation.graphs``) and a torch graph set.

Each graph module wraps one step of ``SAM2Model`` with the contract's input and output names.
Build them after loading the weights: input-independent encodings (the trunk's resized position
embedding) are computed once at construction and exported as constants.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch
from torch import nn

from edgekit.card import GraphSpec
from edgekit.errors import InputError
from edgekit.models.sam2.model import SAM2Model
from edgekit.segmentation import graphs as contract


class ImageEncoderGraph(nn.Module):
    """image (1, 3, S, S) in [0, 1] -> image_embed, image_embed_nomem, image_pos, feat_s0, feat_s1."""

    def __init__(self, model: SAM2Model) -> None:
        super().__init__()
        self.model = model
        side = model.config.image_size // 4
        with torch.no_grad():
            pos = model.image_encoder.trunk.position_embedding(side, side)
        self.register_buffer("trunk_pos", pos.detach().clone(), persistent=False)

    def forward(self, image: torch.Tensor) -> tuple[torch.Tensor, ...]:
        out = self.model.encode_image(image, self.trunk_pos)
        return tuple(out[name] for name in contract.output_names(contract.IMAGE_ENCODER))


class MemoryAttentionGraph(nn.Module):
    """image_embed, image_pos, mem_feats, mem_pos, mem_tpos_idx, obj_ptrs, obj_ptr_tpos -> pix_feat."""

    def __init__(self, model: SAM2Model) -> None:
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
            image_embed, image_pos, mem_feats, mem_pos, mem_tpos_idx, obj_ptrs, obj_ptr_tpos
        )


class MaskDecoderGraph(nn.Module):
    """pix_feat, feat_s0, feat_s1, points, labels, mask_input, has_mask_input -> masks, iou,
    obj_ptrs, object_score_logits."""

    def __init__(self, model: SAM2Model) -> None:
        super().__init__()
        self.model = model

    def forward(
        self,
        pix_feat: torch.Tensor,
        feat_s0: torch.Tensor,
        feat_s1: torch.Tensor,
        point_coords: torch.Tensor,
        point_labels: torch.Tensor,
        mask_input: torch.Tensor,
        has_mask_input: torch.Tensor,
    ) -> tuple[torch.Tensor, ...]:
        return self.model.decode(
            pix_feat, feat_s0, feat_s1, point_coords, point_labels, mask_input, has_mask_input
        )


class MemoryEncoderGraph(nn.Module):
    """image_embed, mask_logits, binarize, object_score_logits -> mem_feats, mem_pos."""

    def __init__(self, model: SAM2Model) -> None:
        super().__init__()
        self.model = model

    def forward(
        self,
        image_embed: torch.Tensor,
        mask_logits: torch.Tensor,
        binarize: torch.Tensor,
        object_score_logits: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return self.model.encode_memory(image_embed, mask_logits, binarize, object_score_logits)


class MaskPromptGraph(nn.Module):
    """mask (1, 1, S, S) in {0, 1} -> mask_input (1, 1, 4h, 4w)."""

    def __init__(self, model: SAM2Model) -> None:
        super().__init__()
        self.model = model

    def forward(self, mask: torch.Tensor) -> torch.Tensor:
        return self.model.mask_prompt_input(mask)


GRAPH_CLASSES: dict[str, type[nn.Module]] = {
    contract.IMAGE_ENCODER: ImageEncoderGraph,
    contract.MEMORY_ATTENTION: MemoryAttentionGraph,
    contract.MASK_DECODER: MaskDecoderGraph,
    contract.MEMORY_ENCODER: MemoryEncoderGraph,
    contract.MASK_PROMPT: MaskPromptGraph,
}


def graph_modules(model: SAM2Model) -> dict[str, nn.Module]:
    """Every contract graph of ``model`` as an eval-mode module, by graph name."""
    return {name: cls(model).eval() for name, cls in GRAPH_CLASSES.items()}


def example_inputs(
    model: SAM2Model, num_frames: int = 2, num_ptrs: int = 3, num_points: int = 2
) -> dict[str, dict[str, torch.Tensor]]:
    """Per graph, inputs of the contract's shapes and dtypes (F, P, N as given)."""
    cfg = model.config
    s, c, cm, h = cfg.image_size, cfg.d_model, cfg.mem_dim, cfg.embed_size
    g = torch.Generator().manual_seed(0)

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g)

    embed = rand(1, c, h, h)
    return {
        contract.IMAGE_ENCODER: {"image": torch.rand(1, 3, s, s, generator=g)},
        contract.MEMORY_ATTENTION: {
            "image_embed": embed,
            "image_pos": rand(1, c, h, h),
            "mem_feats": rand(num_frames, cm, h, h),
            "mem_pos": rand(num_frames, cm, h, h),
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
    model: SAM2Model,
    include_mask_prompt: bool = True,
    examples: dict[str, dict[str, torch.Tensor]] | None = None,
) -> list[GraphSpec]:
    """The contract graphs of ``model`` as GraphSpecs (example inputs, output names, dynamic axes)
    for the exporters; ``examples`` overrides the random example inputs per graph."""
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


class TorchGraph:
    """A graph module called like a runtime session: ``feeds`` (numpy) -> outputs (numpy)."""

    def __init__(self, name: str, module: nn.Module) -> None:
        self.name = name
        self.module = module.eval()
        self.inputs = contract.input_names(name)
        self.outputs = contract.output_names(name)

    def __call__(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        missing = [n for n in self.inputs if n not in feeds]
        if missing:
            raise InputError(f"graph '{self.name}' needs inputs {missing}; got {sorted(feeds)}")
        args = [torch.from_numpy(np.ascontiguousarray(feeds[n])) for n in self.inputs]
        with torch.inference_mode():
            out = self.module(*args)
        out = (out,) if isinstance(out, torch.Tensor) else out
        return {n: t.numpy() for n, t in zip(self.outputs, out, strict=True)}

    run = __call__


def torch_graph_set(model: SAM2Model) -> dict[str, TorchGraph]:
    """The graph set of ``model`` on torch, for ``edgekit.segmentation.stream.SAM2Stream``."""
    return {name: TorchGraph(name, module) for name, module in graph_modules(model).items()}
