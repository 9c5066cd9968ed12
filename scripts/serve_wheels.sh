#!/usr/bin/env bash
# Wheels that `transformers serve` (transformers[serving]) needs on the H200 test machine, which has Python 3.12,
# transformers 5.17, httpx (so httpcore, h11, idna, certifi), huggingface-hub, tokenizers, typer (click), tqdm, and
# no package registry. Run here, from the project root; scripts/gpu_check.sh installs every .whl/*.whl into /tmp/site.
# Resolved with pip for cp312 manylinux on 2026-12-01 (openai < 3: openai 3 moved to httpx2, which the H200 lacks).
set -euo pipefail
dest=${1:-.whl}
mkdir -p "$dest"
plat=(--python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64
      --platform any)
for w in openai==2.54.0 jiter==0.19.0 distro==1.9.0 \
         pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 \
         fastapi==0.165.0 starlette==1.10.0 annotated-doc==0.0.7 opentelemetry-api==1.45.2 uvicorn==0.54.0 \
         anyio==4.16.0 sniffio==1.3.1 typing-extensions==4.16.0; do
  python3 -m pip download -q --no-deps --only-binary=:all: "${plat[@]}" -d "$dest" "$w"
done
ls "$dest"
