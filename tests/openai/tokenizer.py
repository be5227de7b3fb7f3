"""Writes a word-level Hugging Face tokenizer into a directory, for aiperf's `--tokenizer` (whose
default tokenizers come from a model hub this machine cannot reach).

Usage: python3 tokenizer.py DIR   (needs the `tokenizers` package; aiperf's venv has it)

statico's preset answers one lowercase ASCII word and a space per token, so a tokenizer that splits
on whitespace counts exactly statico's tokens: aiperf's output token counts, and with them its
inter-token latency, then agree with the server's `usage`. Every word it has not seen is `unk`,
still one token. DIR gets `tokenizer.json` and the `tokenizer_config.json` that `AutoTokenizer`
reads it through.
"""

import json
import pathlib
import sys

from tokenizers import Tokenizer, models, pre_tokenizers

# Three letters each: a prompt made of them, space-separated, is 4 bytes a word, so statico's estimate
# of its tokens (ceil(bytes / 4)) is its word count, as this tokenizer's.
WORDS = (
    "the and for are but not you all any can had her was one our out day get has him his how man "
    "new now old see two way who boy did its let put say she too use dog cat sun sky red big end"
).split()


def main():
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    vocab = {"unk": 0}
    for word in WORDS:
        vocab.setdefault(word, len(vocab))
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="unk"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.save(str(out / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": "unk",
        "model_max_length": 1_000_000,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=1) + "\n")


if __name__ == "__main__":
    main()
