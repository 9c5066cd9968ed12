"""The accounting and the data every other package builds on: architectures and the model zoo, GPU specs, the byte
floor, result records, sample statistics. Pure Python (numpy and scipy at most): no torch, here or in anything it
imports, so `floor`, `predict` and `report` of a zoo model run where torch is not installed (a local or Hub config
is built on the meta device first, with torch and transformers)."""
