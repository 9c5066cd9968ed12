"""floorline endpoint against a real server this project did not write — `transformers serve` on tiny-qwen2 with
random weights and a tokenizer built by the `tokenizers` library (servedir.py), started here on a free port of
127.0.0.1 and stopped after — and, for the failures a real server will not produce on demand (early stop, packed
events, no streaming, HTTP errors, a vocabulary mismatch), a small stub server on 127.0.0.1. Every request loop is
bounded; no traffic leaves this machine."""

from __future__ import annotations

import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import read_jsonl_strict, run_cli
from floorline import endpoint, floor, records, zoo

CTX, STEPS, WARMUP, SESSIONS = 96, 12, 2, 2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """`transformers serve DIR` on 127.0.0.1:PORT, CPU; yields (url, model dir); stopped at the end."""
    from floorline import servedir

    d = servedir.write_model_dir(zoo.ZOO["tiny-qwen2"], tmp_path_factory.mktemp("served") / "tiny-qwen2")
    port = free_port()
    exe = Path(sys.executable).with_name("transformers")
    log = open(d.parent / "serve.log", "w")
    proc = subprocess.Popen([str(exe), "serve", str(d), "--host", "127.0.0.1", "--port", str(port), "--device",
                             "cpu", "--dtype", "bfloat16"], stdout=log, stderr=subprocess.STDOUT,
                            env={**os.environ, "HF_HUB_OFFLINE": "1"})
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:  # bounded: the server loads in a few seconds
            assert proc.poll() is None, (d.parent / "serve.log").read_text()[-2000:]
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                time.sleep(0.25)
        else:
            pytest.fail("transformers serve did not listen within 90 s")
        yield url + "/v1", d
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@pytest.fixture(scope="module")
def endpoint_records(served, tmp_path_factory):
    url, d = served
    out = tmp_path_factory.mktemp("ep") / "ep.jsonl"
    # --served-model: transformers 5.17's GET /v1/models lists the Hub cache (HTTP 500 without one), not the model
    rc, stdout, stderr = run_cli(["endpoint", "--url", url, "--model", "tiny-qwen2", "--served-model", str(d),
                                  "--ctx", f"{CTX},{2 * CTX}",
                                  "--steps", str(STEPS), "--warmup", str(WARMUP), "--sessions", str(SESSIONS),
                                  "--device", "cpu", "--output", str(out)])
    assert rc == 0, stderr
    return read_jsonl_strict(out), stdout, stderr


def test_transformers_serve_records(endpoint_records):
    recs, stdout, stderr = endpoint_records
    a = zoo.ZOO["tiny-qwen2"]
    assert len(recs) == 2 * SESSIONS
    assert [(r["ctx"], r["endpoint_session"]) for r in recs] == [(c, s) for c in (CTX, 2 * CTX)
                                                                  for s in range(SESSIONS)]
    for r in recs:
        assert not [k for k in records.REQUIRED_KEYS if k not in r]
        assert r["mode"] == "endpoint" and r["kind"] == "cell" and r["valid"] is True, r.get("reason")
        assert r["endpoint_url"].startswith("http://127.0.0.1:") and r["endpoint_url"].endswith("/v1")
        assert r["endpoint_server_header"] == "uvicorn"
        # as many tokens as asked, one per event, the warm-up dropped
        assert r["completion_tokens"] == r["max_tokens"] == 1 + WARMUP + STEPS
        assert r["tokens_per_event"] == [1] * r["max_tokens"] and r["tokens_per_event_exact"] is True
        assert len(r["itl_ms"]) == WARMUP + STEPS and r["samples_ms"] == r["itl_ms"][WARMUP:]
        assert all(x > 0 for x in r["samples_ms"]) and r["ttft_ms"] > 0
        assert r["step_ms_median"] == pytest.approx(sorted(r["samples_ms"])[STEPS // 2 - 1: STEPS // 2 + 1][0] / 2
                                                    + sorted(r["samples_ms"])[STEPS // 2] / 2)
        # the exact prompt length (the server counted it), and the floor of the tiny model at it
        assert r["prompt_tokens"] == r["ctx"] and r["floor_ctx"] == r["ctx"]
        assert r["floor_bytes"] == floor.floor(a, r["ctx"]).bytes
        assert r["paper_floor_bytes"] == floor.floor(a, r["ctx"], convention="paper").bytes
        assert r["measured_gbps"] > 0
        assert r["floor_ms_measured"] == pytest.approx(r["floor_bytes"] / (r["measured_gbps"] * 1e9) * 1e3)
        # transformers serve rejects ignore_eos (HTTP 422): asked again without it, and said so
        assert r["endpoint_dropped_fields"] == ["ignore_eos"] and r["ignore_eos"] is False
        assert r["event_times_ms"] == sorted(r["event_times_ms"])
    prompts = {r["endpoint_prompt_method"] for r in recs}
    assert prompts == {"text, word count calibrated from usage.prompt_tokens"}  # transformers serve has no /tokenize
    assert "TTFT ms" in stdout and "endpoint" in stdout


def test_endpoint_records_in_report(endpoint_records, tmp_path):
    from floorline import report

    recs, _, _ = endpoint_records
    p = tmp_path / "r.jsonl"
    records.append(p, recs)
    loaded, _ = report.load_results([str(p)])
    files = report.write_report(loaded, tmp_path / "rep", [])
    text = (tmp_path / "rep" / "report.md").read_text()
    assert "| tiny-qwen2 | 96 | endpoint |" in text and len(files) >= 3


def test_served_model_unknown_is_one_line(served):
    url, _ = served
    rc, _, err = run_cli(["endpoint", "--url", url, "--model", "tiny-qwen2", "--served-model", "nope", "--ctx", "16"])
    assert rc == 2 and "nope" in err and err.count("\n") == 1


# --------------------------------------------------------------------------------------------- a stub server
class Stub(http.server.BaseHTTPRequestHandler):
    """An OpenAI-like server whose behaviour each test sets: `mode` and what it saw."""

    mode = "ok"
    seen: list = []
    n_vocab = 2048

    def log_message(self, *a):
        pass

    def _json(self, code: int, obj) -> None:
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        type(self).seen.append(("GET", self.path, dict(self.headers)))
        if self.path == "/v1/models":
            if self.mode == "http500":
                return self._json(500, {"error": "boom"})
            return self._json(200, {"data": [{"id": "stub", "owned_by": "llamacpp",
                                              "meta": {"n_vocab": self.n_vocab}}]})
        if self.path == "/props":
            return self._json(200, {"build_info": "b9999-stub"})
        return self._json(404, {"error": "not found"})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        type(self).seen.append(("POST", self.path, dict(self.headers), body))
        if self.path == "/tokenize":
            return self._json(200, {"tokens": [(7 * i) % 2000 + 1 for i in range(len(body["content"].split()))]})
        if self.mode == "nostream":
            return self._json(200, {"choices": [{"text": "x", "index": 0, "finish_reason": "length"}],
                                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})
        n = body["max_tokens"] if self.mode != "early" else 5
        per = 2 if self.mode == "packed" else 1
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()
        for i in range(0, n, per):
            time.sleep(0.002)
            k = min(per, n - i)
            chunk = {"id": "c", "object": "text_completion", "created": 0, "model": "stub",
                     "choices": [{"index": 0, "text": "ab"[:k], "finish_reason": None}]}
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.flush()
        usage = {"prompt_tokens": len(body["prompt"]), "completion_tokens": n, "total_tokens": n}
        last = {"id": "c", "object": "text_completion", "created": 0, "model": "stub",
                "choices": [{"index": 0, "text": "", "finish_reason": "stop" if self.mode == "early" else "length"}],
                "usage": usage}
        self.wfile.write(f"data: {json.dumps(last)}\n\ndata: [DONE]\n\n".encode())
        self.wfile.flush()


@pytest.fixture
def stub():
    Stub.mode, Stub.seen, Stub.n_vocab = "ok", [], 2048
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Stub)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    srv.shutdown()
    srv.server_close()


def _stub_run(url, tmp_path, *extra):
    out = tmp_path / "s.jsonl"
    rc, stdout, err = run_cli(["endpoint", "--url", url, "--model", "tiny-llama", "--ctx", "32", "--steps", "6",
                               "--warmup", "1", "--device", "none", "--gpu", "h200", "--output", str(out), *extra])
    return rc, (read_jsonl_strict(out) if out.exists() else []), err


def test_stub_tokenize_path_api_key_and_server_name(stub, tmp_path, monkeypatch):
    monkeypatch.setenv("FLOORLINE_API_KEY", "sk-secret-123")
    rc, recs, err = _stub_run(stub, tmp_path)
    assert rc == 0, err
    r = recs[0]
    assert r["endpoint_prompt_method"] == "token ids from /tokenize" and r["prompt_tokens"] == 32
    completion = [s for s in Stub.seen if s[0] == "POST" and s[1] == "/v1/completions"][0]
    assert isinstance(completion[3]["prompt"], list) and len(completion[3]["prompt"]) == 32
    assert completion[3]["ignore_eos"] is True and completion[3]["temperature"] == 0 and completion[3]["stream"]
    assert {k.lower(): v for k, v in completion[2].items()}["authorization"] == "Bearer sk-secret-123"  # sent, never written
    assert "sk-secret-123" not in (tmp_path / "s.jsonl").read_text()
    assert r["endpoint_api_key_env"] == "FLOORLINE_API_KEY"
    assert (r["endpoint_server"], r["endpoint_server_version"]) == ("llama.cpp", "b9999-stub")
    assert r["device"] == "remote" and r["gpu_key"] == "h200" and r["measured_gbps"] is None
    assert r["floor_ms_peak"] == pytest.approx(r["floor_bytes"] / 4800e9 * 1e3) and r["floor_ms_measured"] is None


def test_stub_stops_early_is_invalid_with_the_count(stub, tmp_path):
    Stub.mode = "early"
    rc, recs, err = _stub_run(stub, tmp_path)
    assert rc == 1 and recs[0]["valid"] is False
    assert recs[0]["reason"].startswith("the server stopped after 5 of 8 tokens (finish_reason stop)")


def test_stub_packed_events_are_detected(stub, tmp_path):
    Stub.mode = "packed"
    rc, recs, err = _stub_run(stub, tmp_path)
    r = recs[0]
    assert rc == 0 and r["tokens_per_event_exact"] is False and r["token_events"] == 4
    assert r["tokens_per_event"] == [2.0] * 4 and len(r["itl_ms"]) == 6
    assert any("packs tokens" in w for w in r["warnings"]) and "packs tokens" in err


@pytest.mark.parametrize("mode, args, want", [
    ("nostream", [], "streams"),
    ("http500", [], "HTTP 500"),
    ("vocab", [], "vocabulary of 4096"),
    ("ok", ["--bpw", "Q4_K_M"], "mixes several ggml types"),
])
def test_stub_bad_input_is_one_line_and_writes_nothing(stub, tmp_path, mode, args, want):
    Stub.mode = mode
    if mode == "vocab":
        Stub.n_vocab = 4096
    rc, recs, err = _stub_run(stub, tmp_path, *args)
    assert rc == 2 and want in err and err.count("\n") == 1 and "Traceback" not in err, err
    assert not (tmp_path / "s.jsonl").exists()


def test_unreachable_and_credentials_in_url(tmp_path):
    port = free_port()
    rc, _, err = run_cli(["endpoint", "--url", f"http://127.0.0.1:{port}/v1", "--model", "tiny-llama", "--ctx", "8"])
    assert rc == 2 and "cannot reach the server" in err and err.count("\n") == 1
    rc, _, err = run_cli(["endpoint", "--url", f"http://u:pw@127.0.0.1:{port}/v1", "--model", "tiny-llama"])
    assert rc == 2 and "FLOORLINE_API_KEY" in err and "pw" not in err


def test_clean_url_and_per_token_samples():
    assert endpoint.clean_url("https://h.example:8443/v1/?x=1#f") == "https://h.example:8443/v1"
    assert endpoint.per_token_samples([0, 2_000_000, 8_000_000], [1, 1, 3]) == [2.0, 2.0, 2.0, 2.0]
