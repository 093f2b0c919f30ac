"""The part stream keeps memory bounded by the part: the prefetch thread runs one part ahead and no further, and
the driver lets go of every part it has written, so a long run holds as many parts as a short one."""

import threading
import weakref

import numpy as np
import pytest

import tfsent.inference.driver as driver
import tfsent.inference.engine as engine
from tfsent.inference.options import PredictOptions
from tfsent.inference.stream import prefetch

from helpers.tiny import tiny_checkpoint


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return tiny_checkpoint(tmp_path_factory.mktemp("ckpt") / "model", max_seq_length=64)


@pytest.mark.parametrize("depth", [1, 2])
def test_prefetch_starts_an_item_only_when_the_consumer_is_depth_behind(depth):
    lock = threading.Lock()
    taken, started = [0], []

    def items():
        for j in range(12):
            with lock:
                # Item j may start once items 0..j-depth are taken: the consumer holds one, `depth` are ahead.
                started.append((j, taken[0]))
            yield j

    got = []
    for item in prefetch(items(), depth=depth):
        with lock:
            taken[0] += 1
        got.append(item)
    assert got == list(range(12))
    assert [j for j, _ in started] == list(range(12))
    assert all(seen >= j - depth + 1 for j, seen in started), started


def test_prefetch_raises_the_producers_error_after_the_items_before_it():
    def items():
        yield 1
        yield 2
        raise ValueError("bad row in part 2")

    got = []
    with pytest.raises(ValueError, match="bad row in part 2"):
        for item in prefetch(items()):
            got.append(item)
    assert got == [1, 2]
    with pytest.raises(ValueError, match="depth must be >= 1"):
        next(prefetch(iter([1]), depth=0))


def test_prefetch_stops_its_thread_when_the_consumer_leaves_early():
    made = []

    def items():
        for j in range(1000):
            made.append(j)
            yield j

    stream = prefetch(items())
    assert next(stream) == 0
    stream.close()  # joins the thread
    assert len(made) <= 2
    assert not any(t.name == "tfsent-prefetch" for t in threading.enumerate())


def test_the_driver_drops_each_part_before_the_next_but_one(ckpt, tmp_path, monkeypatch):
    """When part k is predicted, every array of parts 0..k-1 (tokens, source columns) is gone, and part k+1 is the
    only one tokenized ahead: a run of many parts holds two, as a run of two does, and compiles no more shapes."""
    (tmp_path / "in.txt").write_text("".join(f"sentence {i} on margins and revenue\n" for i in range(42)))
    real_predict, real_jobs = driver._predict_part, driver.jobs
    alive: list[list[weakref.ref]] = []
    made = []

    def arrays(job):
        return [*job.tokens.values.values(), job.tokens.offsets, job.tokens.truncated,
                *(v for v in job.columns.values() if isinstance(v, np.ndarray))]

    def predict_part(predictor, strategy, job, *args, **kw):
        k = job.index
        assert k == len(alive)
        # Parts 0..k-1 were written: nothing of theirs may remain. Part k+1 may be tokenized, k+2 not yet.
        assert all(ref() is None for refs in alive for ref in refs), f"a part before {k} is still referenced"
        assert len(made) <= k + 2, f"{len(made)} parts tokenized while part {k} is predicted"
        alive.append([weakref.ref(a) for a in arrays(job)])
        return real_predict(predictor, strategy, job, *args, **kw)

    def jobs(*args, **kw):
        for job in real_jobs(*args, **kw):
            made.append(job.index)
            yield job

    real_bucketed, shrinks = engine.predict_bucketed, []

    def predict_bucketed(*args, shrink_tails, **kw):
        shrinks.append(shrink_tails)
        return real_bucketed(*args, shrink_tails=shrink_tails, **kw)

    monkeypatch.setattr(driver, "_predict_part", predict_part)
    monkeypatch.setattr(driver, "jobs", jobs)
    monkeypatch.setattr(engine, "predict_bucketed", predict_bucketed)
    summary = driver.predict(ckpt, tmp_path / "in.txt", tmp_path / "out.csv",
                             PredictOptions(strategy="cpu", global_batch_size=8, buckets=(16,), part_size=5,
                                            progress=False))
    assert summary["rows"] == 42 and summary["parts"] == 9 and len(alive) == 9
    # Full parts pad their tails to the global batch (one compiled shape per bucket however many parts run); only
    # the short last part runs its tail small.
    assert shrinks == [False] * 8 + [True]
