#!/usr/bin/env bash
# the figures of record of qwen3-8b's native cells at the kept sources (scripts/h200_suite.toml, group today: bf16 at
# ctx 2048 and 16384, int4 at 2048); the records were appended to results/h200/suite/today.jsonl
OUT=$OUT SUITE_GROUPS=today SUITE_ONLY="qwen3-8b:native" SUITE_BUDGET=250 bash scripts/gpu_check.sh suite 2>&1 | tail -15
