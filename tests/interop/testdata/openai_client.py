"""Drives sluice's gateway with the official openai package, as an OpenAI user would.

Usage: openai_client.py --base-url http://gateway/v1 --dead-url http://gateway-without-decider/v1

Each check prints one JSON line {"name", "ok", "detail"}; the Go test (openai_test.go) turns
every line into a subtest. The gateway under test runs `sluice dev` (decision headers on).
"""

import argparse
import asyncio
import json
import re
import time
import sys
import traceback

import openai

PLAIN, PD, SESSION = "sim-chat", "sim-pd", "sim-session"
HEX32 = re.compile(r"^[0-9a-f]{32}$")
CHECKS = []


def check(fn):
    CHECKS.append(fn)
    return fn


class Failed(Exception):
    pass


def want(cond, msg):
    if not cond:
        raise Failed(msg)


def messages(text="Hello, sluice!"):
    return [{"role": "user", "content": text}]


def status_error(exc_type, fn, status, code, param=None):
    """fn must raise exc_type with OpenAI's error object: status, code, param, type, message."""
    try:
        fn()
    except exc_type as e:
        want(e.status_code == status, f"status {e.status_code}, want {status}")
        want(e.code == code, f"code {e.code!r}, want {code!r} (body {e.body!r})")
        want(param is None or e.param == param, f"param {e.param!r}, want {param!r}")
        want(isinstance(e.type, str) and e.type, f"type {e.type!r}, want a string")
        want(isinstance(e.body, dict) and e.body.get("message"), f"body {e.body!r} lacks a message")
        want(e.response.headers.get("content-type", "").startswith("application/json"), "error is not JSON")
        return f"{exc_type.__name__} {status} {code}: {e.body.get('message')[:80]}"
    except openai.APIStatusError as e:
        raise Failed(f"raised {type(e).__name__} {e.status_code} {e.body!r}, want {exc_type.__name__}")
    raise Failed(f"no error, want {exc_type.__name__}")


@check
def chat(c, _):
    r = c.chat.completions.create(model=PLAIN, messages=messages(), max_tokens=8)
    want(r.object == "chat.completion", f"object {r.object!r}")
    want(r.id and r.model == PLAIN, f"id {r.id!r} model {r.model!r}")
    want(len(r.choices) == 1 and r.choices[0].message.role == "assistant", f"choices {r.choices!r}")
    want(r.choices[0].message.content, "empty content")
    want(r.choices[0].finish_reason in ("stop", "length"), f"finish_reason {r.choices[0].finish_reason!r}")
    want(r.usage and r.usage.prompt_tokens > 0 and r.usage.completion_tokens > 0, f"usage {r.usage!r}")
    return r.choices[0].message.content


@check
def chat_headers(c, _):
    raw = c.chat.completions.with_raw_response.create(model=PLAIN, messages=messages(), max_tokens=4)
    h = raw.headers
    want(HEX32.match(h.get("x-request-id", "")), f"x-request-id {h.get('x-request-id')!r}, want 32 hex digits")
    for name in ("x-sluice-engine", "x-sluice-bucket", "x-sluice-reason", "x-sluice-matched-tokens"):
        want(h.get(name), f"no {name} header: {dict(h)}")
    want(h["x-sluice-bucket"] == "plain", f"bucket {h['x-sluice-bucket']!r}")
    r = raw.parse()
    want(r.choices[0].message.content, "empty content")
    return f"engine {h['x-sluice-engine']} reason {h['x-sluice-reason']}"


@check
def chat_prefix_reuse(c, _):
    """A repeated long prompt is routed to the engine holding its prefix (cache_aware, KV events)."""
    prompt = "a prompt long enough to fill several KV blocks " * 60
    seen = []
    for _ in range(120):  # up to ~30 s on a loaded machine
        raw = c.chat.completions.with_raw_response.create(model=PLAIN, messages=messages(prompt), max_tokens=2)
        raw.parse()
        seen.append((raw.headers["x-sluice-engine"], raw.headers["x-sluice-reason"], int(raw.headers["x-sluice-matched-tokens"])))
        if seen[-1][2] > 0:
            want(seen[-1][1] == "cache_candidate", f"matched tokens without cache_candidate: {seen}")
            return f"after {len(seen)} requests: {seen[-1]}"
        time.sleep(0.25)  # the KV events of the first answer travel engine -> ZMQ -> Kafka -> decider
    raise Failed(f"no prefix match in {len(seen)} requests: {seen}")


@check
def chat_stream(c, _):
    stream = c.chat.completions.create(model=PLAIN, messages=messages(), max_tokens=6, stream=True)
    chunks = list(stream)
    want(chunks, "no chunks")
    want(all(ch.object == "chat.completion.chunk" for ch in chunks), f"objects {[ch.object for ch in chunks]}")
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    want(text, "no streamed content")
    finish = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
    want(finish, "no finish_reason in the stream")
    return f"{len(chunks)} chunks: {text!r}"


@check
def chat_stream_pd(c, _):
    """A disaggregated stream: decode's answer, x-sgl-decode-url naming the decode engine."""
    with c.chat.completions.with_streaming_response.create(model=PD, messages=messages("Disaggregate me"), max_tokens=6, stream=True) as raw:
        decode_url = raw.headers.get("x-sgl-decode-url", "")
        engines = raw.headers.get("x-sluice-engine", "")
        chunks = list(raw.parse())
    want(decode_url.startswith("http://"), f"x-sgl-decode-url {decode_url!r}")
    want(engines.count(",") == 1, f"x-sluice-engine {engines!r}, want prefill, decode")
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    want(text, "no streamed content")
    return f"{engines} via {decode_url}"


@check
def completions(c, _):
    r = c.completions.create(model=PLAIN, prompt="Once upon a time", max_tokens=5)
    want(r.object == "text_completion", f"object {r.object!r}")
    want(len(r.choices) == 1 and r.choices[0].text, f"choices {r.choices!r}")
    want(r.usage and r.usage.completion_tokens > 0, f"usage {r.usage!r}")
    return r.choices[0].text


@check
def completions_stream(c, _):
    chunks = list(c.completions.create(model=PLAIN, prompt="Once upon a time", max_tokens=5, stream=True))
    text = "".join(ch.choices[0].text for ch in chunks if ch.choices)
    want(text, f"no streamed text in {len(chunks)} chunks")
    return f"{len(chunks)} chunks"


@check
def models_list(c, _):
    ids = [m.id for m in c.models.list()]
    for m in (PLAIN, PD, SESSION):
        want(m in ids, f"{m} not in {ids}")
    return ", ".join(ids)


@check
def models_retrieve(c, _):
    m = c.models.retrieve(PLAIN)
    want(m.id == PLAIN and m.object == "model" and m.owned_by, f"{m!r}")
    return repr(m)


@check
def session_sticks(c, _):
    engines = set()
    for _ in range(4):
        raw = c.with_options(default_headers={"x-session-id": "openai-conv-1"}).chat.completions.with_raw_response.create(
            model=SESSION, messages=messages("again"), max_tokens=2)
        raw.parse()
        engines.add(raw.headers["x-sluice-engine"])
    want(len(engines) == 1, f"one session went to {engines}")
    return engines.pop()


@check
def async_chat(_, args):
    async def run():
        async with openai.AsyncOpenAI(base_url=args.base_url, api_key="unused", max_retries=0) as ac:
            r = await ac.chat.completions.create(model=PLAIN, messages=messages(), max_tokens=4)
            stream = await ac.chat.completions.create(model=PLAIN, messages=messages(), max_tokens=4, stream=True)
            n = 0
            async for _ in stream:
                n += 1
            return r.choices[0].message.content, n

    content, n = asyncio.run(run())
    want(content and n > 0, f"content {content!r}, {n} chunks")
    return f"{content!r}, {n} chunks"


@check
def error_unknown_model(c, _):
    return status_error(openai.NotFoundError, lambda: c.chat.completions.create(model="gpt-9", messages=messages()), 404, "model_not_found", "model")


@check
def error_retrieve_unknown_model(c, _):
    return status_error(openai.NotFoundError, lambda: c.models.retrieve("gpt-9"), 404, "model_not_found", "model")


@check
def error_empty_messages(c, _):
    return status_error(openai.BadRequestError, lambda: c.chat.completions.create(model=PLAIN, messages=[]), 400, "empty_array", "messages")


@check
def error_n_above_one(c, _):
    return status_error(openai.BadRequestError, lambda: c.chat.completions.create(model=PLAIN, messages=messages(), n=2), 400, "unsupported_value", "n")


@check
def error_negative_max_tokens(c, _):
    return status_error(openai.BadRequestError, lambda: c.completions.create(model=PLAIN, prompt="x", max_tokens=-1), 400, "invalid_max_tokens",
                        "max_tokens")


@check
def error_unknown_route(c, _):
    return status_error(openai.NotFoundError, lambda: c.embeddings.create(model=PLAIN, input="x"), 404, "unknown_url")


@check
def error_decider_unavailable(_, args):
    dead = openai.OpenAI(base_url=args.dead_url, api_key="unused", max_retries=0)
    return status_error(openai.InternalServerError, lambda: dead.chat.completions.create(model=PLAIN, messages=messages()), 503,
                        "decider_unavailable")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--dead-url", required=True)
    args = ap.parse_args()
    c = openai.OpenAI(base_url=args.base_url, api_key="unused", max_retries=0, timeout=30)
    print(json.dumps({"name": "openai_version", "ok": True, "detail": openai.__version__}), flush=True)
    for fn in CHECKS:
        try:
            detail = fn(c, args)
            print(json.dumps({"name": fn.__name__, "ok": True, "detail": str(detail)}), flush=True)
        except Exception as e:  # every failure is reported, not only the first
            detail = str(e) if isinstance(e, Failed) else traceback.format_exc()
            print(json.dumps({"name": fn.__name__, "ok": False, "detail": detail}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
