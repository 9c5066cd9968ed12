"""floorline endpoint: batch-1 decode of a running OpenAI-compatible server, against the floor of the model it serves.

Owns: talking to the server (the `openai` client library: HTTP, SSE parsing, errors; no hand-written parser), building
a prompt of ctx tokens, one streamed request at a time, per-event arrival times, and the record (the schema of `run`,
mode "endpoint"). The floor comes from floor.py / gguf.py for the architecture given with --model; the bandwidth
from bandwidth.py when the server runs on this host. May not build or run a model itself.

One session = one streamed /v1/completions request: temperature 0, a fixed max_tokens = 1 + warmup + steps with
`ignore_eos` where the server takes it (a server that rejects the field is asked again without it, and the record
says so; one that stops early gives an invalid record with the count). Arrival of every SSE event is taken with
perf_counter_ns as the client library hands it over. TTFT = first token event - request start; each later event's
gap, divided by the tokens it carried, is one per-token sample; the first `warmup` per-token samples are dropped, as
`run` drops its warm-up steps (they stay in the record as itl_ms). Tokens per event: from cumulative usage in each
chunk (vLLM's continuous_usage_stats) where a server sends it, else one per event when the final usage agrees with
the event count; when it does not, the server packs tokens (or holds partial characters) and the record says so,
with per-token samples = gap / (tokens / events).

Prompt: a fresh random text per session (seeded by --seed, ctx and session) so no prefix cache is reused. Where the
server tokenizes (POST /tokenize: llama.cpp, vLLM, SGLang, TGI) the text's first ctx token ids are sent as the prompt:
exactly ctx tokens. Elsewhere the number of words is calibrated with max_tokens=1 requests on the same text with a
different first word (no shared prefix) until the server's usage.prompt_tokens is ctx; the record keeps the count
the server reported for the measured request, and the floor is counted at it.
"""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable, Iterator
from urllib.parse import urlsplit, urlunsplit

import numpy as np

from floorline.bench import system
from floorline.core import floor, gguf, specs, stats, zoo
from floorline.core.arch import Arch
from floorline.core.errors import UserError
from floorline.core.records import SCHEMA_VERSION

API_KEY_ENVS = ("FLOORLINE_API_KEY", "OPENAI_API_KEY")  # read in this order; never from the command line
OPTIONAL_FIELDS = ("ignore_eos", "stream_options", "seed")  # dropped one by one when a server rejects them
CALIBRATION_PROBES = 16  # max_tokens=1 requests per session at most, when the server cannot tokenize
LETTERS = np.array(list("abcdefghijklmnopqrstuvwxyz"))


@dataclass
class EndpointConfig:
    url: str
    model: str  # what the floor is counted from: zoo name, local directory (config.json is enough) or Hub id
    ctxs: list[int]
    served_model: str | None = None
    warmup: int = 5
    steps: int = 30
    sessions: int = 1
    seed: int = 0
    dtype: str = "bf16"  # unquantised parts and the KV cache
    weight_bits: int | None = None
    group_size: int | str | None = None  # as given: None (not given: 128), "row" or elements (floor.group_option)
    bpw: str | None = None  # average bits per weight of every weight matrix, or a ggml type name (Q4_K, Q8_0)
    gpu: str | None = None  # the server's GPU (datasheet peak), when not detected here
    device: str = "auto"  # where the server runs when on this host: its streaming bandwidth is measured; none: not
    api_key_env: str | None = None
    timeout_s: float = 600.0
    download: bool = False
    first_session: int = 0  # the index of the first session (ab: its session number)
    prompt_salt: int | None = None  # more seed for the prompts (ab: its attempt), so a retried session's is fresh

    def prompt_seed(self, ctx: int, session: int) -> list[int]:
        return [self.seed, ctx, session] + ([] if self.prompt_salt is None else [self.prompt_salt])

    @property
    def max_tokens(self) -> int:
        return 1 + self.warmup + self.steps


# ------------------------------------------------------------------------------------------------------------ inputs
def clean_url(url: str) -> str:
    """The URL as recorded: no user:password, no query or fragment (where keys hide)."""
    u = urlsplit(url)
    host = u.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host + (f":{u.port}" if u.port else "")
    return urlunsplit((u.scheme, netloc, u.path.rstrip("/"), "", ""))


def check_url(url: str) -> None:
    u = urlsplit(url)
    try:
        u.port
    except ValueError:
        raise UserError(f"--url {url!r}: bad port; give http://HOST:PORT/v1") from None
    if u.scheme not in ("http", "https") or not u.hostname:
        raise UserError(f"--url {url!r} is not an http(s) URL; give http://HOST:PORT/v1")
    if u.password or "key=" in u.query.lower() or "token=" in u.query.lower():
        raise UserError("--url carries a credential; put the API key in $FLOORLINE_API_KEY instead (the command line "
                        "is visible to other users and lands in records)")


def is_loopback(url: str) -> bool:
    h = (urlsplit(url).hostname or "").lower()
    return h in ("localhost", "::1") or h.startswith("127.")


def api_key(env: str | None) -> tuple[str, str | None]:
    """(the key, the variable it came from); "EMPTY" when none is set (local servers take any key)."""
    for name in ([env] if env else API_KEY_ENVS):
        v = os.environ.get(name)
        if v:
            return v, name
    if env:
        raise UserError(f"--api-key-env {env}: that environment variable is not set")
    return "EMPTY", None


def weight_floors(a: Arch, ctx: int, cfg: EndpointConfig) -> tuple[floor.Floor, floor.Floor, dict]:
    """(strict, paper, what the record says about the weight format)."""
    if a.prequant and cfg.bpw is None and cfg.weight_bits is None:
        raise UserError(f"{a.name} is a pre-quantised checkpoint (config.json's quantization_config): add "
                        f"{a.prequant} for the weights the server holds")
    if cfg.bpw is not None:
        if cfg.weight_bits is not None or cfg.group_size is not None:
            raise UserError(f"give --bpw or --weight-bits{' --group-size' if cfg.group_size is not None else ''}, "
                            f"not both (--bpw is the average over every weight, its groups' scales included)")
        bpw, label = gguf.parse_bpw(cfg.bpw)
        fl = [gguf.format_floor(a, ctx, cfg.dtype, c, bpw=bpw) for c in ("strict", "paper")]
        return fl[0], fl[1], {"quant": label, "weight_bits_per_weight": bpw, "weight_format": f"{label}: every "
                              f"weight matrix at {bpw:g} bits, norms, biases and KV cache {cfg.dtype}"}
    group = floor.group_option(cfg.group_size, cfg.weight_bits, cfg.dtype)
    fmt = floor.weight_format(cfg.dtype, cfg.weight_bits, group)
    fl = [gguf.format_floor(a, ctx, cfg.dtype, c, cfg.weight_bits, group) for c in ("strict", "paper")]
    label = f"int{fmt.bits}-" + (f"g{fmt.group_size}" if fmt.group_size else "row") if fmt.bits else "none"
    return fl[0], fl[1], {"quant": label, "weight_bits_per_weight": fmt.bits or fmt.dense_bytes * 8,
                          "weight_group_size": fmt.group_size if fmt.bits else None}


# ------------------------------------------------------------------------------------------------------------ server
def _openai():
    try:
        import openai
    except ImportError:
        raise UserError("floorline endpoint needs the openai client library: pip install 'floorline[endpoint]'") \
            from None
    return openai


def _first_line(e: Exception) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0][:200]


class Server:
    """One OpenAI-compatible server: the client, what it reports about itself, and its optional endpoints."""

    def __init__(self, url: str, key: str, timeout_s: float):
        self.openai = _openai()
        self.url = url.rstrip("/")
        u = urlsplit(self.url)
        base_path = u.path[: -len("/v1")] if u.path.endswith("/v1") else u.path
        self.root = urlunsplit((u.scheme, u.netloc, base_path, "", ""))
        self.client = self.openai.OpenAI(base_url=self.url, api_key=key, max_retries=0, timeout=timeout_s)
        self.info: dict = {}
        self.models: list[dict] = []
        self.can_tokenize: bool | None = None
        self.token_prompts: bool | None = None  # takes a list of token ids as the prompt
        self.dropped: list[str] = []  # optional request fields the server rejected

    def _call(self, what: str, fn, status_ok: bool = True):
        """fn(), its failures as one-line UserErrors (status_ok=False: HTTP error statuses pass through)."""
        o = self.openai
        try:
            return fn()
        except o.APIConnectionError as e:  # refused, unreachable, timed out (APITimeoutError)
            cause = e.__cause__ or e
            raise UserError(f"{clean_url(self.url)}: cannot reach the server ({_first_line(cause)}); start it or fix "
                            f"--url") from None
        except o.APIStatusError as e:
            if not status_ok and e.status_code != 401:
                raise
            if e.status_code == 404:  # a chat-only server, a wrong base path or model
                raise UserError(f"{clean_url(self.url)}: {what}: HTTP 404: {_status_message(e)}; floorline measures "
                                f"POST {clean_url(self.url)}/completions (text completions, not chat): check that the "
                                f"server offers it, --url (its OpenAI base, usually ending /v1) and --served-model") \
                    from None
            if e.status_code != 401:
                raise UserError(f"{clean_url(self.url)}: {what}: HTTP {e.status_code}: {_status_message(e)}; check "
                                f"--url and --served-model") from None
            raise UserError(f"{clean_url(self.url)}: {what}: HTTP 401, the server wants an API key; put it in "
                            f"${API_KEY_ENVS[0]}") from None

    def get_json(self, url: str) -> object | None:
        """GET an absolute URL; None on an HTTP error status (a probe of an endpoint a server may not have), or on
        a dropped connection (uvicorn closes a kept-alive one after a failed route)."""
        return self._probe(lambda: self.client.get(url, cast_to=object))

    def post_json(self, url: str, body: dict) -> object | None:
        return self._probe(lambda: self.client.post(url, body=body, cast_to=object))

    def _probe(self, fn) -> object | None:
        o = self.openai
        try:
            return fn()
        except (o.APIStatusError, o.APIConnectionError):
            return None

    def probe(self) -> None:
        """GET /v1/models (reachability, the served ids, llama.cpp's meta); then name and version where reported.
        An HTTP error there is kept, not fatal: some servers fail it (transformers 5.17 scans the Hub cache and
        answers 500 when there is none) and serve completions all the same; --served-model then names the model."""
        o = self.openai
        self.models_error = None
        try:
            raw = self._call("GET /models", lambda: self.client.models.with_raw_response.list(), status_ok=False)
            header = raw.http_response.headers.get("server")
            try:
                data = raw.http_response.json()
            except ValueError:
                raise UserError(f"{clean_url(self.url)}/models did not answer JSON; is --url the server's /v1 base?") \
                    from None
            self.models = [m for m in (data.get("data") or []) if isinstance(m, dict)] if isinstance(data, dict) \
                else []
        except o.APIStatusError as e:
            self.models_error = f"HTTP {e.status_code}: {_status_message(e)}"
            header = e.response.headers.get("server")
        owned = sorted({str(m.get("owned_by")) for m in self.models if m.get("owned_by")})
        name, version = None, None
        for path, vkey in (("/version", "version"), ("/props", "build_info"), ("/info", "version")):
            j = self.get_json(self.root + path)
            if isinstance(j, dict) and j.get(vkey):
                version = str(j[vkey])
                name = {"/props": "llama.cpp", "/info": j.get("router") or "text-generation-inference"}.get(path)
                break
        known = {"vllm": "vLLM", "llamacpp": "llama.cpp", "sglang": "SGLang"}
        name = name or next((known[o] for o in owned if o in known), None)
        self.info = {"endpoint_server": name, "endpoint_server_version": version, "endpoint_server_header": header,
                     "endpoint_owned_by": ",".join(owned) or None, "endpoint_models_error": self.models_error}

    def served(self, want: str | None) -> dict:
        ids = [str(m.get("id")) for m in self.models]
        if want is None:
            if not ids:
                why = f"failed ({self.models_error})" if self.models_error else "lists no model"
                raise UserError(f"{clean_url(self.url)}: GET /models {why}; name the served model with "
                                f"--served-model")
            return self.models[0]
        for m in self.models:
            if str(m.get("id")) == want:
                return m
        if not ids:
            return {"id": want}
        raise UserError(f"--served-model {want!r} is not served here; the server lists: {', '.join(ids)[:300]}")

    def tokenize(self, model: str, text: str) -> list[int] | None:
        """Token ids from POST /tokenize (llama.cpp: content; vLLM / SGLang: prompt; TGI: inputs), or None."""
        if self.can_tokenize is False:
            return None
        j = self.post_json(self.root + "/tokenize", {"model": model, "prompt": text, "content": text, "inputs": text,
                                                      "add_special_tokens": False, "add_special": False})
        ids = None
        if isinstance(j, dict) and isinstance(j.get("tokens"), list):
            ids = [t["id"] if isinstance(t, dict) else t for t in j["tokens"]]
        elif isinstance(j, list) and all(isinstance(t, dict) and "id" in t for t in j):
            ids = [t["id"] for t in j]
        ok = ids is not None and all(isinstance(i, int) for i in ids)
        self.can_tokenize = ok
        return ids if ok else None

    def complete(self, body: dict, stream: bool):
        """POST /v1/completions; optional fields the server rejects (HTTP 400 / 422 naming them) are dropped and
        the request sent again, at most once per optional field."""
        o = self.openai
        body = {k: v for k, v in body.items() if k not in self.dropped}
        for _ in range(len(OPTIONAL_FIELDS) + 1):
            extra = {k: body[k] for k in ("ignore_eos",) if k in body}
            kwargs = {k: v for k, v in body.items() if k not in extra}
            try:
                return self.client.completions.create(**kwargs, stream=stream, extra_body=extra or None)
            except o.APIStatusError as e:
                msg = _status_message(e)
                named = [f for f in OPTIONAL_FIELDS if f in body and f in msg]
                if e.status_code not in (400, 422) or not named:
                    raise
                for f in named:
                    self.dropped.append(f)
                    body.pop(f)
        raise AssertionError("unreachable")

    def close(self) -> None:
        self.client.close()


def _status_message(e) -> str:
    body = getattr(e, "body", None)
    if isinstance(body, dict):
        body = body.get("detail") or body.get("message") or body.get("error") or body
    return " ".join(str(body if body is not None else e.message).split())[:300]


# ------------------------------------------------------------------------------------------------------------ prompt
def random_text(n_words: int, rng: np.random.Generator) -> list[str]:
    """Random lowercase words of 2-7 letters: no shared prefix between sessions, no special tokens."""
    lens = rng.integers(2, 8, size=n_words)
    return ["".join(rng.choice(LETTERS, size=int(k))) for k in lens]


@dataclass
class Prompt:
    payload: str | list[int]
    tokens: int | None  # known before sending (tokenized), else the server's usage says
    method: str
    probes: int = 0


def make_prompt(srv: Server, served: str, ctx: int, rng: np.random.Generator, vocab: int) -> Prompt:
    words = random_text(ctx, rng)
    ids: list[int] | None = None
    n = ctx
    for _ in range(8):  # most tokenizers give >= 1 token per word; grow the text (bounded) until it is enough
        ids = srv.tokenize(served, " ".join(words))
        if ids is None or len(ids) >= ctx:
            break
        words += random_text(n, rng)
        n *= 2
    if ids is not None and len(ids) >= ctx:
        if max(ids) >= vocab:
            raise UserError(f"the server's tokenizer gives token id {max(ids)}, past the vocabulary of --model "
                            f"({vocab}); --model must be the architecture the server serves")
        if srv.token_prompts is not False:
            return Prompt(ids[:ctx], ctx, "token ids from /tokenize")
        count = lambda text: len(srv.tokenize(served, text) or [])  # noqa: E731
        return _calibrate(count, ctx, words, rng, "text, word count from /tokenize")
    return _calibrate(lambda text: _prompt_tokens(srv, served, text), ctx, words, rng,
                      "text, word count calibrated from usage.prompt_tokens")


def _prompt_tokens(srv: Server, served: str, text: str) -> int:
    r = srv._call("calibration request", lambda: srv.complete(
        {"model": served, "prompt": text, "max_tokens": 1, "temperature": 0}, stream=False))
    n = getattr(getattr(r, "usage", None), "prompt_tokens", None)
    if not isinstance(n, int):
        raise UserError(f"{clean_url(srv.url)}: the server neither tokenizes (/tokenize) nor reports usage."
                        f"prompt_tokens, so a prompt of ctx tokens cannot be made")
    return n


def _calibrate(count: Callable[[str], int], ctx: int, words: list[str], rng, method: str) -> Prompt:
    """A text such that count(text) == ctx: first the number of words (secant steps), then single-letter words
    added to make up the rest. Each probe uses the same words behind a different first word of the same length, so
    a probe that prefills shares no prefix with the measured request. At most CALIBRATION_PROBES probes; without an
    exact hit, the closest text under ctx (the record then says how many tokens the server counted)."""
    first = "".join(rng.choice(LETTERS, size=len(words[0])))
    pad_letters = list(rng.choice(LETTERS, size=ctx))

    def text(n: int, pad: int, head: str) -> str:
        return " ".join([head, *words[1:n], *pad_letters[:pad]])

    probes, lo, hi = 0, 1, len(words)
    n, best = max(1, min(hi, ctx // 2)), (1, 0, -1)  # (words, pad letters, tokens counted)
    while probes < CALIBRATION_PROBES and lo <= hi:  # the most words whose count stays <= ctx
        probes += 1
        c = count(text(n, 0, first))
        if c <= ctx:
            if c > best[2]:
                best = (n, 0, c)
            if c == ctx:
                break
            if n == len(words) and len(words) < 64 * ctx:  # too few words: add more (bounded)
                words += random_text(len(words), rng)
                hi = len(words)
            lo = n + 1
            n = min(hi, n + max(1, round((ctx - c) * n / max(c, 1))))
        else:
            hi = n - 1
            n = max(lo, n - max(1, round((c - ctx) * n / c)))
    n, pad, c = best
    while c != ctx and probes < CALIBRATION_PROBES:  # then letters, one token each in most vocabularies
        pad = min(ctx, max(0, pad + ctx - c))
        probes += 1
        c = count(text(n, pad, first))
        if best[2] < c <= ctx:
            best = (n, pad, c)
    n, pad, _ = best
    return Prompt(text(n, pad, words[0]), None, method, probes)


# ----------------------------------------------------------------------------------------------------------- session
@dataclass
class Event:
    t_ns: int
    text: str
    usage_tokens: int | None  # cumulative completion tokens where the chunk carries usage
    finish: str | None


@dataclass
class Stream:
    t0_ns: int
    events: list[Event] = field(default_factory=list)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish: str | None = None
    content_type: str | None = None


def stream_once(srv: Server, served: str, prompt: Prompt, cfg: EndpointConfig, seed: int) -> Stream:
    body = {"model": served, "prompt": prompt.payload, "max_tokens": cfg.max_tokens, "temperature": 0,
            "ignore_eos": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True},
            "seed": seed}
    t0 = time.perf_counter_ns()
    st = srv._call("streamed completion", lambda: srv.complete(body, stream=True))
    out = Stream(t0)
    resp = getattr(st, "response", None)
    out.content_type = resp.headers.get("content-type") if resp is not None else None
    try:
        _read_stream(st, out)
    except Exception as e:  # mid-stream, whatever the client library raises for it: data that is not JSON (or not
        # UTF-8), a stall past --timeout, a dropped connection (openai >= 2 wraps the transport's errors, 1.x not)
        raise BrokenStream(f"{clean_url(srv.url)}: the streamed completion broke off after {len(out.events)} "
                           f"event(s) ({type(e).__name__}: {_first_line(e)}); check the server, or raise --timeout",
                           out) from None
    return out


class BrokenStream(UserError):
    """A streamed completion that broke off: bad input before a session was measured (nothing written), a failed
    session after (measure_endpoint records it invalid, with the events that came)."""

    def __init__(self, message: str, stream: Stream):
        super().__init__(message)
        self.stream = stream


def _read_stream(st, out: Stream) -> None:
    with st:
        for chunk in st:  # the library parses SSE; each chunk is stamped as it is handed over
            t = time.perf_counter_ns()
            usage = getattr(chunk, "usage", None)
            choices = getattr(chunk, "choices", None) or []
            text = "".join((getattr(c, "text", None) or "") for c in choices)
            finish = next((c.finish_reason for c in choices if getattr(c, "finish_reason", None)), None)
            out.events.append(Event(t, text, getattr(usage, "completion_tokens", None) if usage else None, finish))
            if usage is not None:
                out.prompt_tokens = getattr(usage, "prompt_tokens", out.prompt_tokens)
                out.completion_tokens = getattr(usage, "completion_tokens", out.completion_tokens)
            out.finish = finish or out.finish


def token_events(s: Stream) -> tuple[list[int], list[int], bool]:
    """(arrival ns, tokens carried) of each event that carried tokens, and whether the counts are exact."""
    times, counts = [], []
    cumulative = [e for e in s.events if e.usage_tokens is not None]
    if len(cumulative) >= 2 and any(e.text for e in cumulative):  # usage in every chunk: exact counts per event
        prev = 0
        for e in s.events:
            if e.usage_tokens is not None and e.usage_tokens > prev:
                times.append(e.t_ns)
                counts.append(e.usage_tokens - prev)
                prev = e.usage_tokens
        return times, counts, True
    ev = [e for e in s.events if e.text]
    times = [e.t_ns for e in ev]
    total = s.completion_tokens
    if total is None or total == len(ev) or not ev:
        return times, [1] * len(ev), total is not None
    k = total / len(ev)  # packed (or held-back) tokens: spread evenly over the events
    return times, [k] * len(ev), False


def per_token_samples(times: list[int], counts: list[float]) -> list[float]:
    """Per-token inter-token latency, ms: each gap after the first token event divided by the tokens the later
    event carried, once per token (a packed event of k tokens gives k samples of gap / k). Tokens that came with
    the first one have no gap of their own and give no sample."""
    out: list[float] = []
    for (a, b), k in zip(zip(times, times[1:]), counts[1:]):
        out += [(b - a) / 1e6 / k] * max(1, round(k))
    return out


# ------------------------------------------------------------------------------------------------------------ record
def local_device(spec: str, here: bool):
    """The torch device whose streaming bandwidth stands for the measured one's, or None (--device none, or auto when
    the thing measured is not on this host)."""
    if spec == "none" or (spec == "auto" and not here):
        return None
    from floorline.bench.device import resolve_device

    return resolve_device(spec)


def device_info(gpu: str | None, dev, remote_name: str = "remote server") -> dict:
    """Where the measured thing ran: --gpu's datasheet peak, and when `dev` is given this host's achievable streaming
    bandwidth, the best of bandwidth.py's patterns as `run` takes it (so both records' floors at measured bandwidth
    are one figure)."""
    spec = specs.lookup(gpu) if gpu else None
    if dev is None:
        name = spec.name if spec else remote_name
        out = {"device": "remote", "device_name": name, "measured_gbps": None, "bw_samples_gbps": None}
    else:
        import torch

        from floorline.bench import bandwidth

        if dev.type == "cuda":
            name = torch.cuda.get_device_name(dev)
            spec = spec or specs.detect(name)
        else:
            name = system.cpu_name()
        bw = bandwidth.achievable_bandwidth(dev)
        out = {"device": str(dev), "device_name": name, "measured_gbps": bw["gbps"], "bw_samples_gbps": bw["samples"],
               "bw_pattern": bw["pattern"], "bw_patterns_gbps": bw["patterns"],
               "bw_pattern_samples_gbps": bw["pattern_samples"]}
    out.update({"gpu_key": spec.key if spec else None, "peak_gbps": spec.peak_gbps if spec else None,
                "peak_source": spec.source if spec else None})
    return out


RESULT_KEYS = ("step_ms_median", "step_ms_p90", "floor_ms_peak", "floor_ms_measured", "fraction_of_floor_peak",
               "fraction_of_floor_measured", "tokens_per_s", "achieved_gbps", "paper_floor_ms_peak",
               "paper_fraction_of_floor_peak")


def judge(rec: dict, strict: floor.Floor, paper: floor.Floor) -> None:
    """The derived figures of `run`'s records; a bandwidth that is unknown (remote server, no --gpu) leaves its
    figures None. Faster than the floor at measured bandwidth is a warning here, not a verdict: the floor assumes
    the weight format given, which floorline cannot see."""
    med, peak, meas = rec["step_ms_median"], rec["peak_gbps"], rec["measured_gbps"]
    rec.update({
        "tokens_per_s": 1e3 / med, "achieved_gbps": strict.bytes / (med * 1e-3) / 1e9,
        "floor_ms_peak": strict.ms(peak), "floor_ms_measured": strict.ms(meas),
        "fraction_of_floor_peak": strict.ms(peak) / med if peak else None,
        "fraction_of_floor_measured": strict.ms(meas) / med if meas else None,
        "paper_floor_ms_peak": paper.ms(peak), "paper_fraction_of_floor_peak": paper.ms(peak) / med if peak else None,
    })
    rec["warnings"].extend(stats.sample_warnings(rec))
    if meas and med < strict.ms(meas):
        rec["warnings"].append("faster than the floor at measured bandwidth: check --weight-bits / --bpw against "
                               "what the server holds (or the working set fits in a cache)")


def session_record(base: dict, a: Arch, ctx: int, cfg: EndpointConfig, prompt: Prompt, s: Stream,
                   session: int) -> dict:
    times, counts, exact = token_events(s)
    ms = lambda t: (t - s.t0_ns) / 1e6  # noqa: E731
    prompt_tokens = s.prompt_tokens if s.prompt_tokens is not None else prompt.tokens
    kv_ctx = prompt_tokens if prompt_tokens else ctx
    strict, paper, fmt = weight_floors(a, kv_ctx, cfg)
    got = s.completion_tokens if s.completion_tokens is not None else round(sum(counts))
    itl = per_token_samples(times, counts)
    rec = {**base, "run_id": uuid.uuid4().hex, "ctx": ctx, **fmt, "warnings": [],
           "endpoint_session": session, "endpoint_prompt_method": prompt.method,
           "endpoint_calibration_probes": prompt.probes, "prompt_tokens": prompt_tokens,
           "max_tokens": cfg.max_tokens, "completion_tokens": got, "finish_reason": s.finish,
           "ignore_eos": "ignore_eos" not in base["endpoint_dropped_fields"],
           "events": len(s.events), "token_events": len(times), "tokens_per_event": counts,
           "tokens_per_event_exact": exact, "event_times_ms": [ms(e.t_ns) for e in s.events],
           "ttft_ms": ms(times[0]) if times else None, "itl_ms": itl,
           "floor_ctx": kv_ctx, "floor_bytes": strict.bytes, "paper_floor_bytes": paper.bytes,
           **{f"floor_bytes_{k}": v for k, v in strict.components.items()}}
    samples = itl[cfg.warmup:]
    if counts and s.completion_tokens is None:
        rec["warnings"].append(f"the server reported no token usage: each of the {len(times)} events that carried "
                               f"text is counted as one token (several tokens an event would read as a slower "
                               f"server, short of its tokens)")
    elif counts and not exact:
        rec["warnings"].append(f"{got} tokens arrived in {len(times)} events ({got / max(1, len(times)):.2f} per "
                               f"event): the server packs tokens; per-token latency = event gap / tokens per event")
    if prompt_tokens is not None and prompt_tokens != ctx:
        rec["warnings"].append(f"the prompt was {prompt_tokens} tokens, not {ctx}; the floor is counted at "
                               f"{prompt_tokens}")
    if got < cfg.max_tokens or len(samples) < 2:
        rec.update({"valid": False, "samples_ms": samples, **{k: None for k in RESULT_KEYS},
                    "reason": f"the server stopped after {got} of {cfg.max_tokens} tokens (finish_reason "
                              f"{s.finish}){'' if rec['ignore_eos'] else '; it does not take ignore_eos'}"})
        return rec
    rec.update(stats.summarize(samples))
    rec.update({"samples_ms": samples, "valid": True, "reason": None})
    judge(rec, strict, paper)
    return rec


def check_inputs(cfg: EndpointConfig) -> Arch:
    """Every input that needs no server, checked; the architecture the floor is counted from."""
    check_url(cfg.url)
    if not cfg.ctxs or min(cfg.ctxs) <= 0:
        raise UserError(f"--ctx must be positive numbers of tokens, got {cfg.ctxs}")
    if cfg.steps < 2 or cfg.warmup < 0 or cfg.sessions < 1:
        raise UserError(f"need --steps >= 2, --warmup >= 0 and --sessions >= 1, got {cfg.steps}, {cfg.warmup}, "
                        f"{cfg.sessions}")
    a = zoo.resolve(cfg.model, need="config", download=cfg.download)
    for ctx in cfg.ctxs:
        if ctx + cfg.max_tokens > a.max_pos:
            raise UserError(f"--ctx {ctx} + {cfg.max_tokens} new tokens passes {a.name}'s max position {a.max_pos}")
        weight_floors(a, ctx, cfg)  # a bad --bpw / --weight-bits fails here, before any request
    if cfg.gpu:
        specs.lookup(cfg.gpu)
    if cfg.device != "none":
        local_device(cfg.device, True)  # a bad --device fails here
    return a


def open_server(cfg: EndpointConfig, a: Arch) -> tuple[Server, dict, str | None]:
    """(the probed server, the served model's entry, the API key's variable): reachable, the model served, its
    vocabulary and context length matching where the server shows them. Closed again on any failure."""
    key, key_env = api_key(cfg.api_key_env)
    srv = Server(cfg.url, key, cfg.timeout_s)
    try:
        srv.probe()
        m = srv.served(cfg.served_model)
        meta = m.get("meta") if isinstance(m.get("meta"), dict) else {}
        n_vocab = meta.get("n_vocab")
        if isinstance(n_vocab, int) and n_vocab != a.vocab:
            raise UserError(f"the server's model {m.get('id')!r} has a vocabulary of {n_vocab}, --model {a.name} one "
                            f"of {a.vocab}; give --model the architecture the server serves")
        max_len = m.get("max_model_len") or meta.get("n_ctx_train")
        if isinstance(max_len, int) and max(cfg.ctxs) + cfg.max_tokens > max_len:
            raise UserError(f"--ctx {max(cfg.ctxs)} + {cfg.max_tokens} new tokens passes the server's context "
                            f"length {max_len}")
    except BaseException:
        srv.close()
        raise
    return srv, m, key_env


def served_name(cfg: EndpointConfig) -> str:
    """Check cfg against its server without measuring; the name the server serves the model under."""
    srv, m, _ = open_server(cfg, check_inputs(cfg))
    srv.close()
    return str(m.get("id"))


def measure_endpoint(cfg: EndpointConfig, log: Callable[[str], None] = lambda s: None) -> Iterator[dict]:
    """One record per ctx x session, yielded as each finishes. Every input is checked, and the server probed,
    before the first request is timed."""
    a = check_inputs(cfg)
    log(f"probing {clean_url(cfg.url)}")
    srv, m, key_env = open_server(cfg, a)
    try:
        served = str(m.get("id"))
        dev = local_device(cfg.device, is_loopback(cfg.url))
        if dev is not None:
            log(f"measuring streaming bandwidth on {dev} (the server's device on this host)")
        base = {"schema_version": SCHEMA_VERSION, "kind": "cell", "mode": "endpoint", **a.identity(),
                "dtype": cfg.dtype, "warmup": cfg.warmup, "steps": cfg.steps,
                "seed": cfg.seed, "floor_convention": "strict", "endpoint_url": clean_url(cfg.url),
                "endpoint_served_model": served, "endpoint_api_key_env": key_env, **srv.info,
                **device_info(cfg.gpu, dev), **system.environment()}
        measured = False  # a session that fails after one was measured is the server's failure, not bad input
        for ctx in cfg.ctxs:
            for session in range(cfg.first_session, cfg.first_session + cfg.sessions):
                seed = cfg.prompt_seed(ctx, session)
                rng = np.random.default_rng(seed)
                n = f"{session + 1}/{cfg.first_session + cfg.sessions}"
                prompt = Prompt("", None, "none")
                try:
                    log(f"ctx {ctx} session {n}: prompt")
                    prompt = make_prompt(srv, served, ctx, rng, a.vocab)
                    log(f"ctx {ctx} session {n}: {cfg.max_tokens} tokens, streamed")
                    prompt, s = _session_stream(srv, served, prompt, cfg, session, rng, a, ctx)
                except UserError as e:
                    if not measured:
                        raise
                    log(f"ctx {ctx} session {n}: failed ({e})")
                    rec = session_record({**base, "endpoint_dropped_fields": list(srv.dropped),
                                          "endpoint_prompt_seed": seed}, a, ctx, cfg, prompt,
                                         getattr(e, "stream", None) or Stream(time.perf_counter_ns()), session)
                    yield {**rec, "valid": False, "reason": f"crash: {e}"}
                    continue
                if isinstance(prompt.payload, list):
                    srv.token_prompts = True
                measured = True
                yield session_record({**base, "endpoint_dropped_fields": list(srv.dropped),
                                      "endpoint_prompt_seed": seed}, a, ctx, cfg, prompt, s, session)
    finally:
        srv.close()


def _session_stream(srv: Server, served: str, prompt: Prompt, cfg: EndpointConfig, session: int,
                    rng: np.random.Generator, a: Arch, ctx: int) -> tuple[Prompt, Stream]:
    """(the prompt sent, its streamed completion); a server that tokenizes but takes no token-id prompt gets a text
    of ctx tokens instead (found on the first session, kept in srv.token_prompts)."""
    try:
        s = stream_once(srv, served, prompt, cfg, cfg.seed + session)
    except UserError:
        if not isinstance(prompt.payload, list) or srv.token_prompts is not None:
            raise
        srv.token_prompts = False
        prompt = make_prompt(srv, served, ctx, rng, a.vocab)
        s = stream_once(srv, served, prompt, cfg, cfg.seed + session)
    if not [e for e in s.events if e.text or e.usage_tokens]:
        raise BrokenStream(f"{clean_url(cfg.url)}: the completion came back with no streamed tokens (content-type "
                           f"{s.content_type or 'none'}); floorline endpoint needs a server that streams (SSE)", s)
    return prompt, s


# ----------------------------------------------------------------------------------------------------------- display
SESSION_COLUMNS = ("ctx", "session", "prompt tokens", "tokens", "events", "tokens/event", "TTFT ms", "ITL ms median",
                   "ITL ms p90", "prompt")


def session_rows(recs: list[dict]) -> list[list[str]]:
    f = lambda v, spec: "-" if v is None else format(v, spec)  # noqa: E731
    return [[str(r["ctx"]), str(r["endpoint_session"]), f(r.get("prompt_tokens"), "d"),
             f(r.get("completion_tokens"), "d"), str(r["token_events"]),
             f(r["completion_tokens"] / r["token_events"] if r.get("token_events") and r.get("completion_tokens")
               else None, ".2f") + ("" if r.get("tokens_per_event_exact") else " (mean)"),
             f(r.get("ttft_ms"), ".1f"), f(r.get("step_ms_median"), ".3f"), f(r.get("step_ms_p90"), ".3f"),
             r["endpoint_prompt_method"]] for r in recs]
