#!/usr/bin/env python3
"""Builds a tiny random-weight Llama model that a real vLLM server can load.

No model can be downloaded where sluice's tests run, so the end-to-end test of
tests/vllm serves this one: a 2-layer Llama (hidden size 128, 2 heads of
size 64) with a small byte-level BPE tokenizer trained here on a made-up corpus,
wrapped as a Hugging Face fast tokenizer with a chat template. Its answers are
noise; what the test needs is a real engine that tokenizes, caches prefixes in
KV blocks, publishes KV events and exports metrics.

Everything is deterministic (fixed corpus, fixed seed), so a rebuild gives the
same files. Run with the python of the vLLM venv (it needs torch, transformers
and tokenizers):

    python scripts/vllm/make_tiny_model.py --out DIR
"""

import argparse
import json
import os
import random
import sys

# The chat template renders every message as "<|role|>content<|end|>" and, when
# asked, opens the assistant's turn. Plain, so /tokenize of a chat is a prefix
# of the same chat with one more message.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>' + message['content'] + '<|end|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)

SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]

VOCAB_SIZE = 1024
SEED = 20261201


def corpus(n_lines=4000):
    """A deterministic made-up English-like corpus to train the BPE merges on."""
    words = (
        "the a an of to and in is it that for on with as was by at be this from or "
        "are which one you all we can has have not but what when there their an "
        "tell me something new question answer about first second third prefix "
        "cache block engine token request model server hello world system user "
        "assistant alpha beta gamma delta epsilon zeta eta theta iota kappa lambda "
        "route gateway decider kafka event metric load memory prompt chat long short"
    ).split()
    rng = random.Random(SEED)
    lines = []
    for i in range(n_lines):
        n = rng.randint(5, 20)
        parts = []
        for _ in range(n):
            w = rng.choice(words)
            if rng.random() < 0.15:
                w += str(rng.randint(0, 2000))
            parts.append(w)
        lines.append(" ".join(parts) + rng.choice([".", "?", "!", ",", ":"]))
    return lines


def build_tokenizer(out):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    # Plain prompts get a BOS, as a Llama 3 tokenizer.json does it (ByteLevel, then a
    # TemplateProcessing): vLLM encodes a completion's text with add_special_tokens on, so its
    # blocks start with <s>, and a gateway tokenizing locally must add it too (tests/vllm
    # checks that). The chat template writes its own <s>; chats are encoded without.
    bos = tok.token_to_id("<s>")
    tok.post_processor = processors.Sequence(
        [
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", bos)]),
        ]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="</s>",
        additional_special_tokens=SPECIAL_TOKENS[3:],
        model_max_length=512,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    return fast


def build_model(out, tokenizer):
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(SEED)
    cfg = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=512,
        rms_norm_eps=1e-5,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    model = LlamaForCausalLM(cfg).to(torch.float32)
    model.eval()
    model.save_pretrained(out, safe_serialization=True)
    GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    ).save_pretrained(out)
    return sum(p.numel() for p in model.parameters())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="directory to write the model into (created)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    tokenizer = build_tokenizer(args.out)
    params = build_model(args.out, tokenizer)
    probe = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hello world, tell me something new"}], add_generation_prompt=True, tokenize=True
    )
    if hasattr(probe, "keys"):  # newer transformers return a BatchEncoding
        probe = probe["input_ids"]
    print(
        json.dumps({"out": args.out, "vocab": len(tokenizer), "params": params, "probe_tokens": len(probe)}),
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
