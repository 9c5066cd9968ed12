PYTHONPATH=$PWD/src timeout 400 python3 -m pytest -q -s -rf -m gpu tests/test_gpu_native.py -k small_models_agree > $OUT/call4/pytest.log 2>&1
