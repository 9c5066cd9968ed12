PYTHONPATH=$PWD/src timeout 200 python3 -m floorline explain --model llama-3.2-1b --ctx 128 --mode native --out $OUT/call5/explain > $OUT/call5/explain.log 2>&1
