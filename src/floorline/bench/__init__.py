"""Measuring one cell in this process: the run's config, building the model, the decode runtimes (one per mode), the
achievable bandwidth, the timed steps into a record, `explain`'s profile and `check`'s kernel checks. Imports core,
device, native and quant."""
