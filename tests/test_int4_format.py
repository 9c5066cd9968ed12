"""floorline's int4 format by hand on small shapes (CPU): both layouts hold the same codes, scales and zeros in the
same bytes; the `mma` layout puts each code where mma.m16n8k16's A fragment wants it; the CUDA GEMV's source and
its refusal where it cannot run."""

from __future__ import annotations

import pytest
import torch

from floorline.native import int4_format as F
from floorline.quant import int4

GEN = torch.Generator().manual_seed(3)


def _case(n=32, k=256):
    codes = torch.randint(0, 16, (n, k), generator=GEN)
    s = torch.rand(n, k // F.GROUP, generator=GEN).to(torch.bfloat16)
    z = torch.randint(0, 16, (n, k // F.GROUP), generator=GEN).to(torch.bfloat16)
    return codes, s, z


@pytest.mark.parametrize("layout", F.LAYOUTS)
def test_both_layouts_round_trip_in_the_same_bytes(layout):
    codes, s, z = _case()
    words, ts, tz = F.pack(codes, s, z, layout)
    c2, s2, z2 = F.codes_of(words, ts, tz, layout)
    assert torch.equal(c2.long(), codes) and torch.equal(s2, s) and torch.equal(z2, z)
    # 4 bits a weight and 2 + 2 bytes a group of 128, as floor.py counts the format
    assert words.numel() * 4 == 32 * 256 // 2 and (ts.numel() + tz.numel()) * 2 == 32 * 2 * 4
    want = (codes.float() - z.float().repeat_interleave(128, 1)) * s.float().repeat_interleave(128, 1)
    assert torch.equal(F.dequant(words, ts, tz, layout), want)


def test_mma_layout_puts_each_code_in_its_tensor_core_fragment():
    """Decode the words as the CUDA kernel does (lane (g, t), word j; LOP3 masks 0x000F000F / 0x00F000F0 on the word
    and on word >> 8 give fragments a0..a3 of mma.m16n8k16: rows g / g+8, inputs 2t, 2t+1 / 2t+8, 2t+9 of step j)."""
    codes, s, z = _case(32, 256)
    words, ts, _ = F.pack(codes, s, z, "mma")
    seen = torch.full_like(codes, -1)
    wv = words.reshape(2, 4, 32, 4)  # tile, 64-input block, lane, word
    for t in range(2):
        for b in range(4):
            for lane in range(32):
                g, tq = lane >> 2, lane & 3
                for j in range(4):
                    word = int(wv[t, b, lane, j]) & 0xFFFFFFFF
                    nib = [(word >> 4 * i) & 0xF for i in range(8)]
                    k0, r0, r1 = 64 * b + 16 * j + 2 * tq, 16 * t + g, 16 * t + g + 8
                    for (row, col), v in {(r0, k0): nib[0], (r0, k0 + 1): nib[4], (r1, k0): nib[1],
                                          (r1, k0 + 1): nib[5], (r0, k0 + 8): nib[2], (r0, k0 + 9): nib[6],
                                          (r1, k0 + 8): nib[3], (r1, k0 + 9): nib[7]}.items():
                        seen[row, col] = v
    assert torch.equal(seen, codes)
    pairs = ts.reshape(2, 2, 8, 2)  # tile, group, lane g, (row g, row g+8): one 32-bit load a lane
    for t in range(2):
        for g in range(8):
            assert torch.equal(pairs[t, :, g, 0], s[16 * t + g]) and torch.equal(pairs[t, :, g, 1], s[16 * t + g + 8])


def test_rows_layout_keeps_its_documented_bits():
    codes, s, z = _case(3 * 16, 256)
    words = F.pack(codes, s, z, "rows")[0]
    word = int(words[1, 16 + 5]) & 0xFFFFFFFF  # row 1, group 1, word 5: inputs 128 + 16 j + 5
    assert [(word >> 4 * j) & 0xF for j in range(8)] == [int(codes[1, 128 + 16 * j + 5]) for j in range(8)]


def test_stacking_tiles_is_stacking_rows():
    """Fusing q/k/v or gate/up concatenates along dim 0: in the `mma` layout, whole 16-row tiles."""
    a, b = _case(32, 128), _case(16, 128)
    packed = [F.pack(*x, "mma") for x in (a, b)]
    cat = [torch.cat([p[i] for p in packed]) for i in range(3)]
    want = torch.cat([F.dequant(*p, "mma") for p in packed])
    assert torch.equal(F.dequant(*cat, "mma"), want)


def test_mma_layout_refuses_shapes_off_its_tiles():
    codes, s, z = _case(24, 256)
    assert "multiple of 16" in F.mma_fits(24, 256)
    with pytest.raises(ValueError, match="multiple of 16"):
        F.pack(codes, s, z, "mma")


def test_the_cpu_takes_the_rows_layout_and_says_why_not_the_cuda_gemv():
    from floorline.native import int4_cuda

    assert int4.layout_for(torch.device("cpu"), 64, 256) == "rows"
    why = int4_cuda.unavailable(torch.device("cpu"))
    assert why and "GPU" in why


def test_cuda_gemv_source_compiles_where_nvrtc_exists():
    from floorline.native import int4_cuda

    if not torch.cuda.is_available():
        pytest.skip("NVRTC comes with CUDA builds of torch; this machine has no CUDA GPU (compiled in gpu_check.sh)")
    major, minor = torch.cuda.get_device_capability()
    for flags, cfg in [(int4_cuda._flags(), (8, 2, 1, 0, 0)), (int4_cuda._flags(pro=1, glu=1, bias=1, pdl=1, xpt=4),
                                                               (4, 2, 1, 1, 0)),
                       (int4_cuda._flags(acc=1, atomic=1, xbf16=1), (8, 1, 4, 0, 6)),
                       (int4_cuda._flags(pro=1, bias=1, pdl=1, xpt=4), (8, 2, 1, 0, 0, 1)),
                       (int4_cuda._flags(acc=1, atomic=1, pdl=1), (16, 2, 4, 0, 0, 0, 4)),
                       (int4_cuda._flags(pro=1, bias=1, pdl=1, xpt=2), (8, 1, 1, 0, 4, 0, 2))]:
        assert len(int4_cuda.compile_source(flags, cfg, f"sm_{major}{minor}")) > 1000


def test_compiled_kernels_are_cached_on_disk_by_source_and_switches(tmp_path, monkeypatch):
    """Each run cell is a fresh process: the cubin comes from the cache once compiled, and a changed switch or
    source compiles anew (compile_source stubbed: this machine has no NVRTC)."""
    from floorline.native import int4_cuda, nvrtc

    monkeypatch.setenv("FLOORLINE_CACHE", str(tmp_path))
    calls = []
    monkeypatch.setattr(int4_cuda, "compile_source", lambda f, c, a: calls.append((f, c, a)) or repr(calls).encode())
    digest = nvrtc.source_digest
    first = int4_cuda._cubin(int4_cuda._flags(), (8, 2, 1, 0, 0), "sm_90")
    assert int4_cuda._cubin(int4_cuda._flags(), (8, 2, 1, 0, 0), "sm_90") == first and len(calls) == 1
    int4_cuda._cubin(int4_cuda._flags(pro=1), (8, 2, 1, 0, 0), "sm_90")
    monkeypatch.setattr(nvrtc, "source_digest", lambda name: digest(name) + "changed")  # an edited .cu file
    int4_cuda._cubin(int4_cuda._flags(), (8, 2, 1, 0, 0), "sm_90")
    assert len(calls) == 3 and len(list((tmp_path / "int4_cuda").glob("*.cubin"))) == 3


def test_the_tuned_configs_are_named_for_the_records(monkeypatch):
    from floorline.native import int4_cuda
    from floorline.native.tuner import TUNER

    monkeypatch.setattr(TUNER, "int4_best", {("cuda:0", 37888, 3584, 1, True, False, False, None, None, 1):
                                           (8, 2, 1, 0, 0, 3),
                                           ("cuda:0", 3584, 18944, 0, False, True, False, None, None, 1):
                                           (8, 1, 4, 0, 6, 0)})
    assert int4_cuda.tuned() == {"37888x3584 norm glu": "w8 ahead2 k1 p3", "3584x18944 acc": "w8 async6 k4"}


def test_a_persistent_grid_compiles_once_whatever_its_size():
    """Configs differing only in persistent blocks an SM share one compiled kernel (the grid is sized at launch);
    the loop over row blocks is compiled in only where it is set; a given config takes 5, 6 or 7 fields."""
    from floorline.native import int4_cuda

    assert int4_cuda.compile_key((8, 2, 1, 0, 0, 2)) == int4_cuda.compile_key((8, 2, 1, 0, 0, 3)) == (8, 2, 1, 0, 0, 1)
    assert int4_cuda.compile_key((8, 2, 1, 0, 0, 0)) == (8, 2, 1, 0, 0, 0)
    assert int4_cuda.check_config((8, 2, 1, 0, 0)) == (8, 2, 1, 0, 0, 0, 1)
    assert int4_cuda.check_config((4, 2, 4, 0, 0, 6)) == (4, 2, 4, 0, 0, 6, 1)
    with pytest.raises(ValueError, match="persist"):
        int4_cuda.check_config((8, 2, 1))
    with pytest.raises(ValueError, match="register buffers"):  # the cp.async path does one row block a block
        int4_cuda.check_config((8, 1, 1, 0, 4, 2))
    # persistent configs take the register buffers (the cp.async ring and the flat kernel take one row block a block)
    assert all(c[3] == 0 and c[4] == 0 for c in int4_cuda.CONFIGS if c[5])
    assert any(c[5] for c in int4_cuda.configs_for(37888, 3584, True, False))


def test_row_tiles_a_block_fit_the_shape_and_name_the_config():
    """Several 16-row tiles a block (sharing its staged inputs) only where they divide the tiles and the warps, never
    with glu (a block already holds a gate and an up tile) or the flat kernel; one tile compiles as before (the same
    cubin key)."""
    from floorline.native import int4_cuda

    assert int4_cuda.compile_key((16, 2, 4, 0, 0, 0, 4)) == (16, 2, 4, 0, 0, 0, 4)
    assert int4_cuda.compile_key((16, 2, 4, 0, 0, 0, 1)) == (16, 2, 4, 0, 0, 0)
    assert int4_cuda.check_config((16, 2, 4, 0, 0, 0, 4)) == (16, 2, 4, 0, 0, 0, 4)
    assert int4_cuda.config_name((16, 2, 4, 0, 0, 0, 4)) == "w16 ahead2 k4 t4"
    assert int4_cuda.config_name((8, 2, 1, 0, 0, 3)) == "w8 ahead2 k1 p3"
    with pytest.raises(ValueError, match="row tiles"):
        int4_cuda.check_config((16, 2, 4, 0, 0, 0, 0))
    down = int4_cuda.configs_for(3584, 18944, False, True)
    assert (16, 2, 4, 0, 0, 0, 4) in down and (8, 2, 8, 0, 0, 0, 4) in down
    assert all(c[6] == 1 for c in int4_cuda.configs_for(37888, 3584, True, False))
    # 3584 / 16 = 224 tiles: 4 a block fit; 1040 / 16 = 65 tiles: only one a block
    assert all(c[6] == 1 for c in int4_cuda.configs_for(1040, 3584, False, True))
    assert all((c[0] // c[6]) <= 18944 // 128 // c[2] for c in down)  # every warp has a group to read


def test_seven_tile_blocks_and_split_qkv_fit_only_where_they_divide_and_add():
    """7 and 14 tiles a block where the tiles divide by 7 (qwen2.5-7b's 224), never for 256 tiles (llama-3.1-8b);
    q/k/v (with the norm) splits K only when it adds into its output (mode native's zeroed q/k/v vector)."""
    from floorline.native import int4_cuda

    down = int4_cuda.configs_for(3584, 18944, False, True)
    assert (14, 1, 8, 0, 0, 0, 7) in down and (14, 1, 16, 0, 0, 0, 14) in down
    assert not [c for c in int4_cuda.configs_for(4096, 14336, False, True) if c[6] in (7, 14)]
    qkv = int4_cuda.configs_for(4608, 3584, False, True)
    assert (16, 1, 7, 0, 0, 0, 8) in qkv  # 288 tiles: 36 blocks of 8 x 7 splits of 4 groups
    assert all(c[2] == 1 for c in int4_cuda.configs_for(4608, 3584, False, False))
    words = torch.zeros(4608 // 16, 2 * 3584, dtype=torch.int32)  # (tiles, 16 rows x K codes / 8 a word)
    kw = dict(scales=None, zeros=None, pro=1, norm_w=torch.ones(3584), config=(16, 1, 7, 0, 0, 0, 8))
    with pytest.raises(ValueError, match="zeroed output"):
        int4_cuda.gemv(words, torch.zeros(3584), torch.zeros(4608), **kw)  # stored, not added: no split
    with pytest.raises(ValueError, match="zeroed output"):
        int4_cuda.gemv(words, torch.zeros(3584), torch.zeros(4608), glu=True, acc=True, **kw)
