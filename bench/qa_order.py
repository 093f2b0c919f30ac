"""The order in which ``+experiment=squad`` trains on its windows, for a paired run of ``bench/squad_baseline.py``.

``python bench/qa_order.py --prepared <prepared QA folder> --seed 42 --batch 32 --updates 164 --out order.json``
rebuilds the training stream of ``tfsent.train`` (the same seeded, reshuffled, repeated pipeline, one input
pipeline) and writes, per update, the SHA-1 of each window's real tokens. The PyTorch baseline maps them onto its own
windows, so both frameworks can train on the same batches in the same order: with the same initial weights and no
dropout, what remains between them is arithmetic, not luck.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import pathlib
import sys

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def window_hash(ids) -> str:
    """SHA-1 of a window's token ids without padding (both frameworks hash the same way)."""
    return hashlib.sha1(",".join(str(int(t)) for t in ids).encode()).hexdigest()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prepared", required=True, type=pathlib.Path)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--updates", type=int, required=True)
    parser.add_argument("--out", type=pathlib.Path, required=True)
    args = parser.parse_args(argv)
    import tf_keras

    from tfsent.data.reader import dataset_fn

    # What tfsent.training.loop does before it builds the inputs: the global seed takes part in the shuffle's.
    tf_keras.utils.set_random_seed(args.seed)
    ds = dataset_fn(args.prepared, "train", per_replica_batch=args.batch, training=True, seed=args.seed,
                    repeat=True)(None)
    order = []
    for batch in ds.take(args.updates):
        ids, mask = batch["input_ids"].numpy(), batch["attention_mask"].numpy()
        order.append([window_hash(row[m > 0]) for row, m in zip(ids, mask)])
    args.out.write_text(json.dumps({"prepared": str(args.prepared), "seed": args.seed, "batch": args.batch,
                                    "order": order}) + "\n")
    print(f"{len(order)} updates of {args.batch} windows -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
