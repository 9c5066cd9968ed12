"""What touches the device below any model: the only clocks (timing.py) and the tensor-parallel process group with
its all-reduces (tpdist.py). Imports core only."""
