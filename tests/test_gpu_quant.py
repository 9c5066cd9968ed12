"""GPU checks of every quant backend whose library is here (skipped without CUDA; run by scripts/gpu_check.sh):
conversion passes its own check, the converted tensors hold exactly the bytes the floor counts, a broken layout is
caught, a converted model decodes under a CUDA graph and gives the tokens its dequantised weights give, and the kernel
chain is timed."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

from floorline import quant
from floorline.bench import config, measure, models, runtimes
from floorline.core import floor, zoo
from floorline.quant import base

pytestmark = pytest.mark.gpu

# small, but with every shape each library takes: out a multiple of 256 (Marlin), in a multiple of 128
ARCH = dataclasses.replace(zoo.ZOO["tiny-qwen2"], name="gpu-quant-qwen2", hidden=512, intermediate=1536, layers=2,
                           heads=4, kv_heads=2, head_dim=128, vocab=4096, tied=False, params=None)
BACKENDS = [n for n in quant.NAMES if n != "bf16"]


def _backend(name):
    b = quant.get(name)
    why = b.missing("cuda")
    if why:
        pytest.skip(why)
    return b


def _model(dtype):
    return models.build_random(ARCH, torch.device("cuda"), dtype, seed=0)


@pytest.mark.parametrize("name", BACKENDS)
def test_convert_checks_and_bytes_match_the_floor(name):
    b = _backend(name)
    dtype = b.dtypes[0]
    m = _model(dtype)
    conv = quant.convert(m, b, models.TORCH_DTYPES[dtype])
    fmt = b.format(2)
    want = ARCH.layers * sum(fmt.matrix_bytes(o, i) for o, i in floor.decoder_matrix_shapes(ARCH))
    assert conv.layers == ARCH.layers * 7
    assert conv.stored_bytes == want  # to the byte: the converted tensors against the accounting
    assert conv.max_check_error <= b.check_tolerance
    assert 0.01 < conv.quant_error < 0.3  # int4 loses ~10% of the weights' norm: neither exact nor garbage
    for _, _, _, mod in quant.decoder_linears(m):  # no dense matrix is left behind
        w = getattr(mod, "weight", None)
        assert not (type(w) in (torch.Tensor, torch.nn.Parameter) and w.dtype == models.TORCH_DTYPES[dtype])
    with torch.inference_mode():
        logits = m(input_ids=torch.arange(16, device="cuda")[None], use_cache=False).logits
    assert torch.isfinite(logits).all()


@pytest.mark.parametrize("name", BACKENDS)
def test_a_wrong_reference_is_caught(name):
    """The check can fail: the same module against its reference with the inputs' order reversed."""
    b = _backend(name)
    dtype = models.TORCH_DTYPES[b.dtypes[0]]
    lin = torch.nn.Linear(512, 256, bias=False, device="cuda", dtype=dtype)
    torch.nn.init.normal_(lin.weight, 0, 0.02)
    p = b.pack(lin)
    assert base.check_linear(p.module, p.reference, None, dtype) <= b.check_tolerance
    bad = p.reference.flip(1)  # the right values in the wrong order: what a wrong packing computes
    assert base.check_linear(p.module, bad, None, dtype) > 10 * b.check_tolerance


@pytest.mark.parametrize("name", BACKENDS)
def test_converted_model_decodes_in_a_cuda_graph(name):
    b = _backend(name)
    dtype = b.dtypes[0]
    m = _model(dtype)
    quant.convert(m, b, models.TORCH_DTYPES[dtype])
    prompt = torch.randint(0, ARCH.vocab, (1, 64), device="cuda", generator=torch.Generator("cuda").manual_seed(1))
    rt = runtimes.get("graph", "cuda")(m, 128)
    with torch.inference_mode():
        rt.prefill(prompt, 32)
        rt.prepare()
        for _ in range(8):
            rt.step()
        torch.cuda.synchronize()
    assert int(rt.pos.item()) == 64 + rt.prepare_tokens + 8
    assert 0 <= int(rt.tok.item()) < ARCH.vocab
    rt.close()


def _with_references(m, b, dtype):
    """Convert `m` with backend b; returns an fp32 copy of the model taken before, whose decoder matrices are the
    weights each converted module should apply (Packed.reference, dequantised by floorline, not by the library)."""
    ref = copy.deepcopy(m).float()
    refs = []
    pack = b.pack

    def recording_pack(lin):
        p = pack(lin)
        refs.append(p.reference.detach().float().clone())
        return p

    b.pack = recording_pack
    quant.convert(m, b, models.TORCH_DTYPES[dtype])
    lins = list(quant.decoder_linears(ref))
    assert len(lins) == len(refs) == ARCH.layers * 7
    with torch.no_grad():
        for (_, _, _, lin), w in zip(lins, refs):  # the same order: decoder_linears walks both models alike
            lin.weight.copy_(w)
    return ref


@pytest.mark.parametrize("name", BACKENDS)
def test_converted_model_gives_the_tokens_of_its_dequantised_weights(name):
    """Greedy decode with the library's kernels (static cache, batch 1) against the fp32 model holding the
    dequantised weights, teacher-forced on the same tokens: every step's token is the reference's argmax, or a near
    tie there (the kernels round in bf16/fp16, the reference in fp32)."""
    b = _backend(name)
    dtype = b.dtypes[0]
    m = _model(dtype)
    ref = _with_references(m, b, dtype)
    prompt = torch.randint(0, ARCH.vocab, (1, 64), device="cuda", generator=torch.Generator("cuda").manual_seed(2))
    steps = 16
    rt = runtimes.get("static", "cuda")(m, 64 + steps + 8)
    toks = []
    with torch.inference_mode():
        rt.prefill(prompt, 32)
        for _ in range(steps):
            toks.append(int(rt.tok.item()))
            rt.step()
        seq = torch.cat([prompt, torch.tensor([toks], device="cuda")], dim=1)
        logits = ref(input_ids=seq, use_cache=False).logits[0, 63:63 + steps].float()  # position i predicts i + 1
    rt.close()
    want = logits.argmax(-1).tolist()
    agree = sum(a == w for a, w in zip(toks, want))
    assert agree >= steps - 2, (toks, want)
    for i, (a, w) in enumerate(zip(toks, want)):
        gap = (logits[i, w] - logits[i, a]).item()
        assert gap <= 0.05 * logits[i].std().item(), f"step {i}: token {a}, reference {w}, logit gap {gap:.4f}"


def test_run_records_the_quant_fields_and_the_kernel_chain():
    name = next((n for n in BACKENDS if not quant.get(n).missing("cuda")), None)
    if name is None:
        pytest.skip("no quant library here")
    b = quant.get(name)
    cfg = config.RunConfig("tiny-llama", [128], ["graph"], dtype=b.dtypes[0], device="cuda", warmup=2, steps=5,
                            quant=name, energy=False, kernels=True)
    if b.supports(64, 128):  # tiny-llama's k/v are 64 wide: a backend that cannot store them refuses clearly
        with pytest.raises(measure.UserError, match="cannot store"):
            list(measure.measure_cells(cfg))
        return
    recs = list(measure.measure_cells(cfg))
    cell, chain = recs
    assert cell["valid"], cell["reason"]
    assert cell["quant"] == name and cell["quant_stored_matrix_bytes"] == cell["floor_bytes_decoder_matrices"]
    assert chain["kind"] == "kernels" and chain["valid"] and len(chain["samples_ms"]) == 30
