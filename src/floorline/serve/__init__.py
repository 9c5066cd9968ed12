"""Runtimes floorline does not run itself: a live OpenAI-compatible server (endpoint.py), llama-bench's results
(llamabench.py), and model directories any server can load (servedir.py). Imports core and bench."""
