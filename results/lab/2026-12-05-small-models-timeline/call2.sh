# the device call that made call2/ (one H200; sources 802b148706a7271d): issue 38's small cells through the suite
# (scripts/h200_suite.toml, group small, 260 s), one fresh `floorline run --mode native` process a cell, packed into one
# file. The budget ran out in the third cell (qwen2.5-1.5b: each cell took 85-100 s, ~60 s of it compiling and tuning),
# so two cells came back. The call's qwen3-8b run failed (no PYTHONPATH outside gpu_check.sh): call3.sh
mkdir -p /tmp/g; export SUITE_GROUPS=small SUITE_BUDGET=260; OUT=/tmp/g timeout 290 bash scripts/gpu_check.sh suite 2>&1 | tail -14
tar czf $OUT/suite.tgz -C /tmp/g .
