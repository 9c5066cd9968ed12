# the device call that made call3/ (the same lease as call2, warm; sources 802b148706a7271d): issue 39's native cell
PYTHONPATH=src timeout 170 python3 -m floorline run --model qwen3-8b --ctx 2048 --mode native --output $OUT/qwen3.jsonl > $OUT/qwen3.log 2>&1
