"""load_or_train: a miss trains once and writes the blob atomically, a hit loads without
training, a shipped copy wins over the cache, and a corrupt, truncated or foreign file is skipped
(the recipe retrains and overwrites the cached one)."""

from __future__ import annotations

import io
import threading
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from edgekit.weights_cache import load_or_train, load_weights, save_weights  # noqa: E402

# damaged files are skipped with a warning (asserted in the shipped-file test)
pytestmark = pytest.mark.filterwarnings("ignore:weights .* does not load:UserWarning")


class _Trainer:
    """Trains a tiny Linear(3, 2) a few seeded steps; counts its calls."""

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self.calls = 0

    def __call__(self) -> torch.nn.Module:
        self.calls += 1
        torch.manual_seed(self.seed)
        net = torch.nn.Linear(3, 2)
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        x, y = torch.randn(16, 3), torch.randn(16, 2)
        for _ in range(5):
            opt.zero_grad()
            torch.nn.functional.mse_loss(net(x), y).backward()
            opt.step()
        return net.eval()


def _load(blob: dict[str, Any], found: Path) -> tuple[torch.nn.Module, Path]:
    net = torch.nn.Linear(3, 2)
    net.load_state_dict(blob["state"])
    return net.eval(), found


def _save(result: Any) -> dict[str, Any]:
    net = result[0] if isinstance(result, tuple) else result
    return {"state": net.state_dict(), "seconds": 1.5}


def _cached(path: Path, shipped: Path | None, train: _Trainer, **kw: Any) -> Any:
    """load_or_train where a fresh training result is returned as (net, None)."""
    return load_or_train(path, shipped, lambda: (train(), None), load=_load, save=_save, **kw)


def _same(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_a_miss_trains_once_and_writes_the_blob_atomically(tmp_path: Path) -> None:
    path = tmp_path / "cache" / "net-0123.pt"
    train = _Trainer()
    net, found = _cached(path, None, train)
    assert train.calls == 1 and found is None  # trained now, not loaded
    assert path.is_file()  # and no temporary file left beside it (the lock file stays)
    assert sorted(p.name for p in path.parent.iterdir()) == sorted(
        [path.name, f".{path.name}.lock"]
    )
    blob = torch.load(path, map_location="cpu", weights_only=True)
    assert set(blob) == {"state", "seconds"} and blob["seconds"] == 1.5
    assert _same(_load(blob, path)[0], net)
    assert _same(net, _Trainer()())  # what was written is exactly what training gave


def test_a_hit_loads_without_training(tmp_path: Path) -> None:
    path = tmp_path / "net-0123.pt"
    first, _ = _cached(path, None, _Trainer())
    train, messages = _Trainer(), []
    net, found = _cached(path, None, train, progress=lambda f, m: messages.append((f, m)))
    assert train.calls == 0 and found == path and _same(net, first)
    assert messages == [(1.0, f"loaded cached weights {path}")]


def test_force_trains_and_overwrites_a_cached_file(tmp_path: Path) -> None:
    path = tmp_path / "net-0123.pt"
    _cached(path, None, _Trainer(seed=1))
    train = _Trainer(seed=2)
    net, found = _cached(path, None, train, force=True)
    assert train.calls == 1 and found is None
    assert _same(load_weights(path, None, _load)[0], net)


def test_a_shipped_file_wins_over_the_cache(tmp_path: Path) -> None:
    path, shipped = tmp_path / "cache" / "net-0123.pt", tmp_path / "weights"
    cached, _ = _cached(path, None, _Trainer(seed=1))
    shipped_net, _ = _cached(shipped / path.name, None, _Trainer(seed=2))
    (shipped / "net-9999.pt").write_bytes(path.read_bytes())  # another recipe's file: ignored
    train = _Trainer()
    net, found = _cached(path, shipped, train)
    assert train.calls == 0 and found == shipped / path.name
    assert _same(net, shipped_net) and not _same(net, cached)


def test_a_corrupt_shipped_file_falls_back_to_the_cache(tmp_path: Path) -> None:
    path, shipped = tmp_path / "cache" / "net-0123.pt", tmp_path / "weights"
    cached, _ = _cached(path, None, _Trainer(seed=1))
    shipped.mkdir()
    (shipped / path.name).write_bytes(b"not a torch file")
    train = _Trainer()
    with pytest.warns(UserWarning, match=rf"{shipped / path.name} does not load \(Unpickling"):
        net, found = _cached(path, shipped, train)
    assert train.calls == 0 and found == path and _same(net, cached)


@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty", "foreign"])
def test_a_corrupt_truncated_or_foreign_cache_file_retrains_and_is_overwritten(
    tmp_path: Path, damage: str
) -> None:
    path = tmp_path / "net-0123.pt"
    buffer = io.BytesIO()
    torch.save({"state": torch.nn.Linear(3, 2).state_dict()}, buffer)
    good = buffer.getvalue()
    if damage == "garbage":
        path.write_bytes(b"not a torch file")
    elif damage == "truncated":
        path.write_bytes(good[: len(good) // 2])
    elif damage == "empty":
        path.write_bytes(b"")
    else:  # a readable blob of another shape: ``load`` raises on it
        save_weights(path, {"weights": torch.zeros(4)})
    train = _Trainer()
    net, found = _cached(path, None, train)
    assert train.calls == 1 and found is None
    reloaded, found = load_weights(path, None, _load)
    assert found == path and _same(reloaded, net)


class _Unpicklable:
    def __reduce__(self) -> Any:
        raise RuntimeError("cannot pickle this")


def test_a_failing_write_leaves_the_cached_file_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "net-0123.pt"
    path.write_bytes(b"not a torch file")
    train = _Trainer()
    with pytest.raises(RuntimeError, match="cannot pickle"):
        load_or_train(path, None, train, load=_load, save=lambda net: {"x": _Unpicklable()})
    assert train.calls == 1 and path.read_bytes() == b"not a torch file"
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == sorted([path.name, f".{path.name}.lock"])  # no temporary file left behind


def test_load_weights_is_none_when_nothing_loads(tmp_path: Path) -> None:
    assert load_weights(tmp_path / "net-0123.pt", tmp_path / "weights", _load) is None
    (tmp_path / "net-0123.pt").write_bytes(b"x")
    assert load_weights(tmp_path / "net-0123.pt", None, _load) is None


def test_two_callers_of_a_missing_recipe_train_it_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """B asks while A is still training: B waits for A's lock, then loads A's file."""
    import edgekit.weights_cache as wc

    path = tmp_path / "net-0123.pt"
    train = _Trainer()
    a_training, b_looked, results = threading.Event(), threading.Event(), {}
    real_load = wc.load_weights

    def load_weights(*args: Any, **kwargs: Any) -> Any:
        if threading.current_thread().name == "B":
            b_looked.set()
        return real_load(*args, **kwargs)

    def slow_train() -> tuple[torch.nn.Module, None]:
        a_training.set()
        assert b_looked.wait(30)  # B found nothing: without the lock it would train as well
        return train(), None

    monkeypatch.setattr(wc, "load_weights", load_weights)
    a = threading.Thread(
        target=lambda: results.update(
            a=load_or_train(path, None, slow_train, load=_load, save=_save)
        ),
        name="A",
    )
    b = threading.Thread(target=lambda: results.update(b=_cached(path, None, train)), name="B")
    a.start()
    assert a_training.wait(30)  # A holds the lock and trains
    b.start()
    a.join(60)
    b.join(60)
    assert train.calls == 1
    assert results["a"][1] is None and results["b"][1] == path  # A trained, B loaded A's file
    assert _same(results["a"][0], results["b"][0])
