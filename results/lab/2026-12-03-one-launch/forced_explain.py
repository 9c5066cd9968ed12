"""`floorline explain` with q/k/v + attention in one launch forced to one Config (by name; "off": the separate
kernels), the step tuner's other choices made as usual: where a slower one launch spends its time.
  python forced_explain.py NAME explain --model M --ctx N --mode native --out PREFIX"""
import sys

from floorline.native import qkv_attn as QA

name, argv = sys.argv[1], sys.argv[2:]
forced = None if name == "off" else next(c for c in QA.CANDIDATES if c.name() == name)


def force(net, capture, state, reps=30):
    if net.qkv_attn is not None:
        net.qkv_attn.config = forced
        if forced is not None:
            net.o_merge = None


QA.retune_in_step = force
from floorline.cli import main  # noqa: E402

sys.exit(main(argv))
