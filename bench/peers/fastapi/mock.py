"""An OpenAI-compatible mock of the kind people write by hand: FastAPI, one streamed chat completion
per request, each token a `chat.completion.chunk` made with json.dumps after asyncio.sleep(GAP),
then `data: [DONE]`. The peer of `cargo xtask bench --openai`, served by uvicorn with one worker:

    MOCK_GAP_MS=20 uvicorn mock:app --app-dir bench/peers/fastapi --workers 1
"""

import asyncio
import json
import os
import time
import uuid

from fastapi import FastAPI
from fastapi.responses import StreamingResponse
from pydantic import BaseModel

GAP = float(os.environ.get("MOCK_GAP_MS", "20")) / 1000
WORDS = "the quick brown fox jumps over the lazy dog".split()

app = FastAPI()


class Message(BaseModel):
    role: str
    content: str


class ChatRequest(BaseModel):
    model: str
    messages: list[Message]
    max_tokens: int = 16
    stream: bool = False


@app.post("/v1/chat/completions")
async def chat(req: ChatRequest):
    chunk_id = f"chatcmpl-{uuid.uuid4().hex[:16]}"
    created = int(time.time())

    async def tokens():
        for i in range(req.max_tokens):
            await asyncio.sleep(GAP)
            delta = {"content": WORDS[i % len(WORDS)] + " "}
            if i == 0:
                delta["role"] = "assistant"
            last = i == req.max_tokens - 1
            chunk = {
                "id": chunk_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": req.model,
                "choices": [
                    {
                        "index": 0,
                        "delta": delta,
                        "logprobs": None,
                        "finish_reason": "length" if last else None,
                    }
                ],
            }
            yield f"data: {json.dumps(chunk)}\n\n"
        yield "data: [DONE]\n\n"

    return StreamingResponse(tokens(), media_type="text/event-stream")
