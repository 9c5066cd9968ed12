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
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import complete_lines, read_jsonl_strict, run_cli

from floorline.core import floor, records, specs, zoo
from floorline.core.errors import UserError
from floorline.serve import endpoint
from floorline.study import ab, resume

CTX, STEPS, WARMUP, SESSIONS = 96, 12, 2, 2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """`transformers serve DIR` on 127.0.0.1:PORT, CPU; yields (url, model dir); stopped at the end."""
    from floorline.serve import servedir

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
        # as many tokens as asked, the warm-up dropped; one per event, unless the server sent two queued tokens as
        # one event (transformers 5.25 serve does at times): then the tokens are spread evenly over the events and
        # the counts marked inexact, each gap one sample
        assert r["completion_tokens"] == r["max_tokens"] == 1 + WARMUP + STEPS
        exact = r["token_events"] == r["max_tokens"]
        assert r["tokens_per_event_exact"] is exact and sum(r["tokens_per_event"]) == pytest.approx(r["max_tokens"])
        assert r["tokens_per_event"] == [r["max_tokens"] / r["token_events"]] * r["token_events"]
        assert len(r["itl_ms"]) == sum(max(1, round(k)) for k in r["tokens_per_event"][1:])
        assert r["samples_ms"] == r["itl_ms"][WARMUP:]
        assert all(x > 0 for x in r["samples_ms"]) and r["ttft_ms"] > 0
        assert r["step_ms_median"] == pytest.approx(statistics.median(r["samples_ms"]))
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
    good = 0  # streamed completions served well before `mode` applies (a server that fails mid-run)

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
        try:
            self._post()
        except (BrokenPipeError, ConnectionResetError):  # the client gave up on a stream (the stall and bad modes)
            pass

    def _post(self):
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        type(self).seen.append(("POST", self.path, dict(self.headers), body))
        if self.path == "/tokenize":
            return self._json(200, {"tokens": [(7 * i) % 2000 + 1 for i in range(len(body["content"].split()))]})
        if self.mode == "chatonly" and self.path == "/v1/completions":
            return self._json(404, {"detail": "Not Found"})
        if self.path == "/v1/completions" and type(self).good > 0:
            type(self).good -= 1
            mode, type(self).mode = type(self).mode, "ok"
            try:
                return self._post_stream(body)
            finally:
                type(self).mode = mode
        if self.mode == "nostream":
            return self._json(200, {"choices": [{"text": "x", "index": 0, "finish_reason": "length"}],
                                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})
        self._post_stream(body)

    def _post_stream(self, body):
        n = body["max_tokens"] if self.mode != "early" else 5
        per = 2 if self.mode == "packed" else 1
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()
        for i in range(0, n, per):
            time.sleep(0.002)
            if i == 2 and self.mode == "badjson":
                self.wfile.write(b"data: {this is not json\n\n")
            if i == 2 and self.mode == "stall":
                time.sleep(3)
            k = min(per, n - i)
            chunk = {"id": "c", "object": "text_completion", "created": 0, "model": "stub",
                     "choices": [{"index": 0, "text": "ab"[:k], "finish_reason": None}]}
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.flush()
        usage = {"prompt_tokens": len(body["prompt"]), "completion_tokens": n, "total_tokens": n}
        last = {"id": "c", "object": "text_completion", "created": 0, "model": "stub",
                "choices": [{"index": 0, "text": "", "finish_reason": "stop" if self.mode == "early" else "length"}],
                **({} if self.mode == "nousage" else {"usage": usage})}
        self.wfile.write(f"data: {json.dumps(last)}\n\ndata: [DONE]\n\n".encode())
        self.wfile.flush()


@pytest.fixture
def stub():
    Stub.mode, Stub.seen, Stub.n_vocab, Stub.good = "ok", [], 2048, 0
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
    # sent, never written
    assert {k.lower(): v for k, v in completion[2].items()}["authorization"] == "Bearer sk-secret-123"
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


def test_stub_chat_only_server_names_the_completions_endpoint(stub, tmp_path):
    """A server without /v1/completions (chat only): one line naming the endpoint floorline needs."""
    Stub.mode = "chatonly"
    rc, recs, err = _stub_run(stub, tmp_path)
    assert rc == 2 and not recs and "Traceback" not in err
    assert "HTTP 404" in err and "/v1/completions (text completions, not chat)" in err


def test_stub_without_usage_says_so_and_not_that_the_server_packs_tokens(stub, tmp_path):
    """A server that sends no usage: one token an event, said in a warning; the packed-tokens warning used to fire."""
    Stub.mode = "nousage"
    rc, recs, err = _stub_run(stub, tmp_path)
    r = recs[0]
    assert rc == 0 and r["valid"] and r["completion_tokens"] == 8 and r["tokens_per_event"] == [1] * 8
    assert any("reported no token usage" in w for w in r["warnings"])
    assert not any("packs tokens" in w for w in r["warnings"]) and "packs tokens" not in err


@pytest.mark.parametrize("mode, args, want", [
    ("nostream", [], "streams"),
    ("http500", [], "HTTP 500"),
    ("vocab", [], "vocabulary of 4096"),
    ("ok", ["--bpw", "Q4_K_M"], "mixes several ggml types"),
    ("badjson", [], "broke off after 2 event(s) (JSONDecodeError"),  # a chunk that is not JSON, mid-stream
    ("stall", ["--timeout", "1"], "broke off after 2 event(s) (APITimeoutError"),  # tokens stop past --timeout
])
def test_stub_bad_input_is_one_line_and_writes_nothing(stub, tmp_path, mode, args, want):
    Stub.mode = mode
    if mode == "vocab":
        Stub.n_vocab = 4096
    rc, recs, err = _stub_run(stub, tmp_path, *args)
    assert rc == 2 and want in err and err.count("\n") == 1 and "Traceback" not in err, err
    assert not (tmp_path / "s.jsonl").exists()


def test_a_server_that_fails_mid_run_gives_invalid_sessions_and_exit_1(stub, tmp_path):
    """After a measured session a broken stream is the server's failure, not bad input: the session is recorded
    invalid with why (and the events that came), the next session still runs, and the command exits 1."""
    Stub.mode, Stub.good = "badjson", 1
    rc, recs, err = _stub_run(stub, tmp_path, "--sessions", "3")
    assert rc == 1, err
    assert [r["valid"] for r in recs] == [True, False, False] and [r["endpoint_session"] for r in recs] == [0, 1, 2]
    bad = recs[1]
    assert bad["reason"].startswith("crash: ") and "broke off after 2 event(s) (JSONDecodeError" in bad["reason"]
    assert bad["events"] == 2 and bad["step_ms_median"] is None and bad["floor_bytes"] == recs[0]["floor_bytes"]
    Stub.mode, Stub.good = "nostream", 1  # a reply without streamed tokens, after a measured session: the same
    (tmp_path / "b").mkdir()
    rc, recs, err = _stub_run(stub, tmp_path / "b", "--sessions", "2")
    assert rc == 1 and [r["valid"] for r in recs] == [True, False] and "needs a server that streams" in recs[1]["reason"]


def test_unreachable_and_credentials_in_url(tmp_path):
    port = free_port()
    rc, _, err = run_cli(["endpoint", "--url", f"http://127.0.0.1:{port}/v1", "--model", "tiny-llama", "--ctx", "8"])
    assert rc == 2 and "cannot reach the server" in err and err.count("\n") == 1
    rc, _, err = run_cli(["endpoint", "--url", f"http://u:pw@127.0.0.1:{port}/v1", "--model", "tiny-llama"])
    assert rc == 2 and "FLOORLINE_API_KEY" in err and "pw" not in err


def test_clean_url_and_per_token_samples():
    assert endpoint.clean_url("https://h.example:8443/v1/?x=1#f") == "https://h.example:8443/v1"
    assert endpoint.per_token_samples([0, 2_000_000, 8_000_000], [1, 1, 3]) == [2.0, 2.0, 2.0, 2.0]


# ----------------------------------------------------------------------------------------- ab with endpoint arms
def _ab_cells(path: Path) -> tuple[list[dict], dict]:
    recs = read_jsonl_strict(path)
    summary = [r for r in recs if r["kind"] == "ab_summary"]
    assert len(summary) == 1
    return [r for r in recs if r["kind"] == "cell"], summary[0]


def test_ab_endpoint_against_a_floorline_mode(served, tmp_path):
    """A real server (transformers serve) against floorline's eager step on the same architecture: every session
    runs both arms fresh, the endpoint's with its own random prompt, and the summary is ab's own."""
    url, d = served
    out = tmp_path / "ab.jsonl"
    rc, stdout, stderr = run_cli(["ab", "--model", "tiny-qwen2", "--ctx", "32", "--a", "eager", "--b",
                                  f"endpoint={url},device=none", "--served-model", str(d), "--sessions", "2",
                                  "--steps", "4", "--warmup", "1", "--device", "cpu", "--resamples", "200",
                                  "--output", str(out)])
    assert rc == 0, stderr
    cells, s = _ab_cells(out)
    assert [(r["ab_session"], r["ab_arm"], r["mode"]) for r in cells] == [
        (0, "A", "eager"), (0, "B", "endpoint"), (1, "B", "endpoint"), (1, "A", "eager")]  # A-B, then B-A
    eps = [r for r in cells if r["mode"] == "endpoint"]
    for r in eps:
        assert r["valid"] and r["endpoint_served_model"] == str(d) and r["completion_tokens"] == 1 + 1 + 4
        assert all(x > 0 for x in r["samples_ms"]) and len(r["samples_ms"]) == len(r["itl_ms"]) - 1
        assert len(r["samples_ms"]) == 4 or not r["tokens_per_event_exact"]  # (two tokens sent as one event)
    # a fresh prompt per session: seeded by the session and the attempt
    seeds = [r["endpoint_prompt_seed"] for r in eps]
    assert [sd[2] for sd in seeds] == [0, 1] and seeds[0][3] != seeds[1][3]
    assert [int(r["ab_attempt"], 16) for r in eps] == [sd[3] for sd in seeds]
    by = {(r["ab_session"], r["ab_arm"]): r for r in cells}
    assert s["arm_b"] == f"endpoint {d} at {url.split('://')[1]}" and s["arm_b_config"]["endpoint"] == url
    assert s["ratios"] == [pytest.approx(by[(i, "A")]["step_ms_median"] / by[(i, "B")]["step_ms_median"])
                           for i in (0, 1)]
    assert f"{s['arm_b']} vs eager:" in stdout


@pytest.fixture
def two_stubs():
    Stub.mode, Stub.seen, Stub.n_vocab = "ok", [], 2048
    servers = [http.server.ThreadingHTTPServer(("127.0.0.1", 0), Stub) for _ in range(2)]
    for srv in servers:
        threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield [f"http://127.0.0.1:{srv.server_address[1]}/v1" for srv in servers]
    for srv in servers:
        srv.shutdown()
        srv.server_close()


def _ab_stub_args(urls, out, sessions="2"):
    return ["ab", "--model", "tiny-llama", "--ctx", "32", "--a", f"endpoint={urls[0]},device=none,gpu=h200",
            "--b", f"endpoint={urls[1]},device=none,bpw=Q8_0", "--sessions", sessions, "--steps", "4",
            "--warmup", "1", "--resamples", "200", "--output", str(out)]


def test_ab_two_endpoints_killed_mid_write_resumes_each_session_once(two_stubs, tmp_path, torn):
    out = tmp_path / "ab.jsonl"
    args = _ab_stub_args(two_stubs, out)
    p = torn(args, at=2)  # the first A/B session appended; the second's second arm torn mid-line, then SIGKILL
    assert p.returncode == -9, p.stderr
    first, tail = complete_lines(out)
    assert len(first) == 3 and tail
    p = torn(args)
    assert p.returncode == 0, p.stderr
    recs, tail = complete_lines(out)
    assert tail == "" and recs[:3] == first  # nothing finished is lost
    cells = [r for r in recs if r["kind"] == "cell"]
    summary = [r for r in recs if r["kind"] == "ab_summary"]
    assert len(summary) == 1 and summary[0]["sessions"] == [0, 1] and len(cells) == 5  # the second session ran again
    pairs = ab.completed_sessions(resume.load(out), summary[0]["ab_key"])
    assert all(a["ab_attempt"] == b["ab_attempt"] for a, b in (v.values() for v in pairs.values()))
    lone = first[2]
    assert lone["ab_session"] == 1 and pairs[1][lone["ab_arm"]]["ab_attempt"] != lone["ab_attempt"]
    # the retried session's prompt is not the killed attempt's (the server may hold that one in its cache)
    assert pairs[1][lone["ab_arm"]]["endpoint_prompt_seed"] != lone["endpoint_prompt_seed"]
    for arms in pairs.values():
        assert arms["A"]["endpoint_url"] == two_stubs[0] and arms["A"]["floor_ms_peak"] is not None
        assert arms["B"]["endpoint_url"] == two_stubs[1] and arms["B"]["quant"] == "q8_0"
        assert arms["A"]["device"] == arms["B"]["device"] == "remote"
    assert summary[0]["ratios"] == [pytest.approx(pairs[i]["A"]["step_ms_median"] / pairs[i]["B"]["step_ms_median"])
                                    for i in (0, 1)]


def test_ab_endpoint_arm_that_dies_mid_session_gets_a_failure_record(two_stubs, tmp_path):
    """The server answers the probe, then fails its completions: each session's endpoint arm gets a failure record
    saying why (no session is left without a record for an arm it owed), and ab ends with one line, exit 2."""
    out = tmp_path / "ab.jsonl"
    Stub.mode = "nostream"  # the probe passes; the measurement finds no stream
    rc, _, err = run_cli(_ab_stub_args(two_stubs, out, sessions="1"))
    assert rc == 2 and err.strip().count("\n") == 0 and "no session finished both arms" in err, err
    cells = read_jsonl_strict(out)
    assert len(cells) == 2 and not any(r["valid"] for r in cells)
    assert {(r["ab_arm"], r["endpoint_url"]) for r in cells} == {("A", two_stubs[0]), ("B", two_stubs[1])}
    assert all(r["reason"].startswith("invalid input:") and "streams" in r["reason"] for r in cells)


@pytest.mark.parametrize("arm_b, says", [
    ("endpoint={a}", "same server and model"),
    ("endpoint={dead}", "cannot reach the server"),
    ("endpoint={a},served=nope", "'nope' is not served here"),
    ("endpoint={url},device=tpu", "unknown device"),
])
def test_ab_bad_endpoint_arm_is_one_line_before_any_session(two_stubs, tmp_path, arm_b, says):
    out = tmp_path / "ab.jsonl"
    args = _ab_stub_args(two_stubs, out)
    dead = f"http://127.0.0.1:{free_port()}/v1"
    args[args.index("--b") + 1] = arm_b.format(a=two_stubs[0] + ",device=none", url=two_stubs[0], dead=dead)
    t0 = time.perf_counter()
    rc, _, err = run_cli(args)
    assert rc == 2 and says in err and err.count("\n") == 1 and "Traceback" not in err, err
    assert time.perf_counter() - t0 < 5 and not out.exists()  # no session started, nothing written


# ------------------------------------------------------------------------------------- predict on endpoint records
def test_predict_on_real_endpoint_records(endpoint_records, tmp_path):
    """The real server's records: as measured here (a CPU, no --gpu) predict leaves them out and says why; labelled
    with a datasheet GPU (what `--gpu l4` writes) they calibrate the endpoint's own fit, checked by hand."""
    import numpy as np

    recs, _, _ = endpoint_records
    cpu = tmp_path / "cpu.jsonl"
    records.append(cpu, recs)
    rc, _, err = run_cli(["predict", "--from", str(cpu), "--model", "tiny-qwen2", "--ctx", "64", "--gpu", "h200",
                          "--mode", "endpoint"])
    assert rc == 2 and err.count("\n") == 1, err
    assert f"left out: {len(recs)} endpoint: no datasheet peak_gbps" in err and "--gpu KEY" in err

    l4 = specs.lookup("l4")
    labelled = tmp_path / "l4.jsonl"
    records.append(labelled, [{**r, "gpu_key": "l4", "peak_gbps": l4.peak_gbps} for r in recs])
    rc, out, err = run_cli(["predict", "--from", str(labelled), "--model", "tiny-qwen2", "--ctx", "64", "--gpu",
                            "h200", "--mode", "endpoint", "--format", "json"])
    assert rc == 0, err
    got = json.loads(out)
    # by hand: one cell per ctx (median of its sessions' medians), t = x / eta, least squares on relative error
    cells = {}
    for r in recs:
        cells.setdefault(r["ctx"], []).append(r)
    x = np.array([rs[0]["floor_bytes"] / (l4.peak_gbps * 1e9) * 1e3 for rs in cells.values()])
    t = np.array([np.median([r["step_ms_median"] for r in rs]) for rs in cells.values()])
    u = np.sum(x / t) / np.sum((x / t) ** 2)
    p = got["predictions"][0]
    assert p["mode"] == "endpoint" and p["eta"] == pytest.approx(1 / u, rel=1e-6) and p["overhead_ms"] == 0.0
    b = floor.floor(zoo.ZOO["tiny-qwen2"], 64).bytes
    assert p["floor_bytes"] == b and p["step_ms"] == pytest.approx(b / (p["eta"] * 4800e9) * 1e3, rel=1e-6)
    assert "endpoint (its own fit)" in got["calibration"] and "server at http://127.0.0.1:" in got["calibration"]


def test_local_server_floor_uses_the_best_streaming_pattern(monkeypatch):
    """The server's floor at measured bandwidth is `run`'s: the best of bandwidth.py's patterns, not the copy alone
    (on the H200 a GEMV-like read beats the copy, and a floor from the copy could be beaten)."""
    import torch

    from floorline.bench import bandwidth

    fake = {"copy": (100.0, [100.0]), "read": (130.0, [130.0]), "gemv": (120.0, [120.0])}
    monkeypatch.setattr(bandwidth, "_patterns", lambda dev, nbytes, reps, dtype, which: {k: fake[k] for k in which})
    info = endpoint.device_info(None, torch.device("cpu"))
    assert info["measured_gbps"] == 130.0 and info["bw_pattern"] == "read" and info["bw_samples_gbps"] == [130.0]
    assert info["bw_patterns_gbps"] == {"copy": 100.0, "read": 130.0, "gemv": 120.0}


def test_server_overhead_rows():
    """gpu_check's and the README's table: the median of the valid sessions' ITL against each in-process mode."""
    from floorline.report import display

    def rec(mode, ms, valid=True, **kw):
        return {"kind": "cell", "mode": mode, "step_ms_median": ms, "valid": valid, "ctx": 2048, "steps": 64, **kw}

    recs = [rec("endpoint", 30.0, ttft_ms=60.0, endpoint_server_header="uvicorn"),
            rec("endpoint", 90.0, ttft_ms=70.0), rec("endpoint", 10.0, ttft_ms=80.0),
            rec("endpoint", 1.0, valid=False, ttft_ms=1.0),  # an invalid session (stopped early) is left out
            rec("graph", 8.0), rec("native", 4.0), {"kind": "failure", "mode": "eager"}]
    head, body = display.server_overhead(recs)
    assert "ITL 30.000 ms" in head and "TTFT 70.0 ms" in head and "3 sessions" in head and "uvicorn" in head
    assert body == [["graph", "8.000", "+22.000", "3.75x"], ["native", "4.000", "+26.000", "7.50x"]]
    assert display.server_overhead([rec("graph", 8.0)]) == ("", [])


def test_weight_floors_group_size():
    a = zoo.ZOO["llama-3.2-1b"]
    cfg = endpoint.EndpointConfig(url="http://h:1/v1", model="llama-3.2-1b", ctxs=[128], weight_bits=4)
    strict, _, rec = endpoint.weight_floors(a, 128, cfg)
    assert rec["quant"] == "int4-g128" and strict == floor.floor(a, 128, floor.weight_format("bf16", 4, 128))
    strict, _, rec = endpoint.weight_floors(a, 128, replace(cfg, group_size="row"))
    assert rec["quant"] == "int4-row" and rec["weight_group_size"] is None
    assert strict == floor.floor(a, 128, floor.weight_format("bf16", 4, None))
    for bad, says in ((replace(cfg, weight_bits=None, group_size=64), "add --weight-bits 4 \\(or 8\\)"),
                      (replace(cfg, weight_bits=None, bpw="Q4_K", group_size=64), "not both")):
        with pytest.raises(UserError, match=says):
            endpoint.weight_floors(a, 128, bad)


def test_weight_floors_of_a_pre_quantised_checkpoint_need_its_format():
    from floorline.core.arch import arch_from_config

    a = arch_from_config({**zoo.ZOO["tiny-qwen3"].config,
                          "quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128}}, "awq")
    cfg = endpoint.EndpointConfig(url="http://h:1/v1", model="awq", ctxs=[64])
    with pytest.raises(UserError, match="add --weight-bits 4 --group-size 128 for the weights the server holds"):
        endpoint.weight_floors(a, 64, cfg)
    assert endpoint.weight_floors(a, 64, replace(cfg, weight_bits=4))[2]["quant"] == "int4-g128"
    assert endpoint.weight_floors(a, 64, replace(cfg, bpw="Q4_K"))[2]["quant"] == "q4_k"
