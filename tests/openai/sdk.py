"""Drives statico's OpenAI-compatible preset with the official `openai` Python SDK, for the
end-to-end test `openai::the_openai_sdk_…` (tests/e2e/openai.rs), which checks what this prints.

Usage: python3 sdk.py BASE_URL LIMITED_BASE_URL
  BASE_URL          a route `PREFIX/* openai=on model=llama tokens=5` (e.g. http://127.0.0.1:8080/v1)
  LIMITED_BASE_URL  a route whose status mix is `status=429`

Prints one JSON object: what the SDK made of each answer (whole and streamed, chat and completions,
the model list) and of each error (the exception's class, status and OpenAI error fields), so that
the assertions stay in the Rust test, beside the interface they check.
"""

import json
import sys

import openai

MESSAGES = [{"role": "user", "content": "Say hello in a few words."}]


def whole_chat(client):
    r = client.chat.completions.create(model="llama", messages=MESSAGES, max_tokens=10)
    c = r.choices[0]
    return {
        "id": r.id,
        "object": r.object,
        "model": r.model,
        "role": c.message.role,
        "content": c.message.content,
        "finish_reason": c.finish_reason,
        "usage": r.usage.model_dump(include={"prompt_tokens", "completion_tokens", "total_tokens"}),
    }


def streamed_chat(client, max_tokens):
    chunks = client.chat.completions.create(
        model="llama",
        messages=MESSAGES,
        max_tokens=max_tokens,
        stream=True,
        stream_options={"include_usage": True},
    )
    out = {"ids": [], "objects": [], "roles": [], "contents": [], "finish_reasons": [], "usage": None}
    for chunk in chunks:
        out["ids"].append(chunk.id)
        out["objects"].append(chunk.object)
        if chunk.usage is not None:
            out["usage"] = chunk.usage.model_dump(
                include={"prompt_tokens", "completion_tokens", "total_tokens"}
            )
        for c in chunk.choices:
            out["roles"].append(c.delta.role)
            out["contents"].append(c.delta.content)
            out["finish_reasons"].append(c.finish_reason)
    return out


def whole_completion(client):
    r = client.completions.create(model="llama", prompt="Once upon a time", max_tokens=10)
    return {
        "object": r.object,
        "text": r.choices[0].text,
        "finish_reason": r.choices[0].finish_reason,
        "usage": r.usage.model_dump(include={"prompt_tokens", "completion_tokens", "total_tokens"}),
    }


def streamed_completion(client):
    chunks = client.completions.create(
        model="llama", prompt="Once upon a time", max_tokens=3, stream=True
    )
    out = {"texts": [], "finish_reasons": []}
    for chunk in chunks:
        for c in chunk.choices:
            out["texts"].append(c.text)
            out["finish_reasons"].append(c.finish_reason)
    return out


def error_of(call):
    """The SDK's typed error for a call expected to fail, as fields."""
    try:
        call()
    except openai.APIStatusError as e:
        return {
            "class": type(e).__name__,
            "status": e.status_code,
            "type": e.type,
            "code": e.code,
            "param": e.param,
            "message": e.message,
        }
    return {"class": None}


def main():
    base, limited = sys.argv[1], sys.argv[2]
    client = openai.OpenAI(base_url=base, api_key="none", max_retries=0, timeout=20)
    throttled = openai.OpenAI(base_url=limited, api_key="none", max_retries=0, timeout=20)
    report = {
        "models": [m.id for m in client.models.list()],
        "chat": whole_chat(client),
        "chat_stream": streamed_chat(client, 10),
        "chat_stream_cut": streamed_chat(client, 3),
        "completion": whole_completion(client),
        "completion_stream": streamed_completion(client),
        "rate_limited": error_of(
            lambda: throttled.chat.completions.create(model="llama", messages=MESSAGES)
        ),
        "bad_request": error_of(
            lambda: client.chat.completions.create(model="llama", messages=MESSAGES, max_tokens=0)
        ),
        "not_found": error_of(
            lambda: client.chat.completions.create(model="no-such-model", messages=MESSAGES)
        ),
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
