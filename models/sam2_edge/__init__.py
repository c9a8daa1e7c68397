"""sam2-edge: a compact SAM 2 for streaming segmentation at 256x256, trained in-repo.

``clips`` makes the synthetic training / held-out videos; ``model`` and its parts (``encoder``,
``decoder``, ``memory``) implement the SAM 2 graph contract (``graphs``); ``rollout`` and
``train`` are the training recipe; ``evaluation`` scores a graph set through the streaming
predictor; ``card`` registers it all as the model "sam2-edge". Importing a submodule other than
``clips`` imports torch.
"""
