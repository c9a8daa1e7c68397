"""edgekit's own SAM 2.1 (official architecture, Meta's checkpoint names) and its graphs.

``build_sam2("tiny", image_size=1024, checkpoint="sam2.1_hiera_tiny.pt")`` builds the model
(random weights without a checkpoint); ``torch_graph_set(model)`` gives the graphs of the
contract in ``edgekit.segmentation.graphs`` for the streaming predictor ``edgekit.segmentation.stream``;
``graph_specs(model)`` gives them for export. Importing this package imports torch.
"""

from edgekit.models.sam2.checkpoint import load_checkpoint, load_state_dict_strict
from edgekit.models.sam2.config import SIZES, HieraConfig, SAM2Config, sam2_config
from edgekit.models.sam2.graphs import graph_modules, graph_specs, torch_graph_set
from edgekit.models.sam2.model import SAM2Model, build_sam2, parameter_count

__all__ = [
    "SIZES",
    "HieraConfig",
    "SAM2Config",
    "SAM2Model",
    "build_sam2",
    "graph_modules",
    "graph_specs",
    "load_checkpoint",
    "load_state_dict_strict",
    "parameter_count",
    "sam2_config",
    "torch_graph_set",
]
