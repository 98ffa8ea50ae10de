"""Padding a ragged batch: one copy per image (``ragged.pad_images``) vs one batched gather.

A ragged cache's batch is padded to its largest image before the crop stage. The batched
alternative builds an int64 index as large as the padded batch (8 bytes per pixel) and gathers
through it; the per-image copy is one memcpy of rows per image. Both give the same bytes
(checked first). Timing: ``batchaug.bench.timing``; ms per batch of ``--images``.

    python benchmarks/bench_ragged_pad.py [--images 64] [--window 1]
"""
import argparse

import torch

from batchaug.bench import timing
from batchaug.bench.timing import Call
from batchaug.data.ragged import RaggedImages, pad_images, raw_parts


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--images", type=int, default=64)
    timing.add_arguments(ap, rounds=3, window=1.0, threads="1")
    args = ap.parse_args(argv)
    g = torch.Generator().manual_seed(0)
    ims = [torch.randint(0, 256, (3, 256 + int(torch.randint(0, 120, (1,), generator=g)),
                                  256 + int(torch.randint(0, 150, (1,), generator=g))),
                         dtype=torch.uint8, generator=g) for _ in range(args.images)]
    c = RaggedImages.from_list(ims)
    rows, sizes = c.index, c.index[:, 2:4]

    def loop() -> torch.Tensor:
        return pad_images(raw_parts(c.data, rows, 3), sizes, 3)

    def gather() -> torch.Tensor:
        b = rows.shape[0]
        hm, wm = (int(v) for v in sizes.amax(0))
        h, w = sizes[:, 0].view(b, 1, 1, 1), sizes[:, 1].view(b, 1, 1, 1)
        ch = torch.arange(3).view(1, 3, 1, 1)
        y, x = torch.arange(hm).view(1, 1, hm, 1), torch.arange(wm).view(1, 1, 1, wm)
        inside = (y < h) & (x < w)
        idx = rows[:, 0].view(b, 1, 1, 1) + (ch * h + y) * w + x
        return c.data[torch.where(inside, idx, 0)].masked_fill_(~inside, 0)

    assert torch.equal(loop(), gather())
    summary = timing.compare([Call("loop", loop), Call("gather", gather)], args, "pad")
    print("\n".join(timing.table(summary, "loop", f"{args.images} images",
                                 per_call=args.images)))
    timing.write_json(args.json, summary)


if __name__ == "__main__":
    main()
