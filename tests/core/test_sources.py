"""Where cards come from: registry names, module files, and the weights a bundle was built from."""

from __future__ import annotations

import pytest

from edgekit.errors import BundleError
from edgekit.registry import get_card
from edgekit.sources import card_from_source, check_weights, is_module_spec, weights_record


def test_module_spec_detection() -> None:
    assert is_module_spec("models/net.py:make")
    assert not is_module_spec("photo-cnn") and not is_module_spec("net.py:")


def test_trained_cards_record_their_weights_and_pretrained_ones_do_not() -> None:
    cnn = get_card("photo-cnn")
    record = weights_record(cnn)
    assert record["weights"].startswith("photonet-")
    check_weights(cnn, {"card": "photo-cnn", **record})  # same weights: fine
    with pytest.raises(BundleError, match="training recipe changed"):
        check_weights(cnn, {"card": "photo-cnn", "weights": "photonet-0000"})
    assert weights_record(get_card("minilm")) == {}


def test_source_without_card_is_a_bundle_error() -> None:
    with pytest.raises(BundleError, match="records no source model"):
        card_from_source({})
