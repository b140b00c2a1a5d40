"""A tiny llama model with random weights, written as GGUF with the `gguf` package: what the
llama.cpp lane serves, since the machines cannot download weights.

Its vocabulary is SentencePiece's with byte fallback (any text tokenizes), its chat template
ChatML. Two dimensions of the residual stream are kept apart from the random ones so that its
replies read as words and end: the first is constant (it biases which tokens are ever said),
the second carries the input token's "a sentence ended here" signal, which makes the end token
all but certain after "." and all but impossible elsewhere. A reply is then a few dozen random
words and a full stop, and ends with `finish_reason: stop`."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np

# Its words, with the identity's and the messages' of the tests: a token each (the rest of any
# text falls back to one per character, or per byte).
SAID = """
the a an and or but so of to in on at by for with from is are was be have has it this that we
you they plan data server move copy check wait time step next first then after before keep safe
new old ready done good well sure yes no here there now just say hello help one person work
toward their goals survive restarts working memory below yours written last stop never invent
facts about user when do not know reveal other users tell restart interrupted your my name like
would careful answer moving busy database without any downtime people who use what where
"""
WORDS = SAID.split()
# Known but never said: the words the product's own prompt is made of (a real model's
# vocabulary has them, as a token or two each), capitalized too.
PROMPT_WORDS = """
Continuity assistant helps restarts Never Tell Your notes turn Session Handoff Current State
Critical Context Immediate Next Steps Decisions Made none Earlier turns were compacted into
summary Summary earlier conversation those shown queued arrived busy down
"""
CHARACTERS = [chr(code) for code in range(33, 127)]
CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
HEADS = 4
CONSTANT, SENTENCE_END = 0, 1  # the two dimensions kept apart


def vocabulary() -> tuple[list[str], list[float], list[int]]:
    """Pieces, their scores (SentencePiece merges the best-scored first) and their types."""
    token = gguf.TokenType
    pieces = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"]
    types = [token.UNKNOWN, token.CONTROL, token.CONTROL, token.CONTROL, token.CONTROL]
    pieces += [f"<0x{byte:02X}>" for byte in range(256)]
    types += [token.BYTE] * 256
    # SentencePiece builds a word by merging neighbours into pieces it knows: each prefix of a
    # word is a piece too.
    known = {*WORDS, *PROMPT_WORDS.split(), *(word.capitalize() for word in WORDS)}
    prefixes = {f"▁{word}"[:end] for word in known for end in range(2, len(word) + 1)}
    words = [f"▁{word}" for word in WORDS]
    normal = ["▁", *CHARACTERS, *sorted(prefixes - set(words)), *words]
    pieces += normal
    types += [token.NORMAL] * len(normal)
    scores = [0.0] * len(pieces)
    for index, piece in enumerate(pieces):
        if types[index] == token.NORMAL:
            scores[index] = float(len(piece))  # longer pieces merge first
    return pieces, scores, [int(kind) for kind in types]


def tiny_model_write(
    path: Path, *, context_tokens: int = 512, width: int = 64, layers: int = 2, seed: int = 7
) -> Path:
    """A model whose residual stream is `width` wide, with `layers` layers: the wider and
    deeper, the slower it answers (each token reads every weight once)."""
    feed_forward = 2 * width
    pieces, scores, types = vocabulary()
    vocab = len(pieces)
    end, full_stop = pieces.index("<|im_end|>"), pieces.index(".")
    said = [pieces.index(f"▁{word}") for word in WORDS] + [full_stop]
    random = np.random.default_rng(seed)

    def weights(*shape: int, scale: float = 0.02) -> np.ndarray:
        return (random.standard_normal(shape) * scale).astype(np.float32)

    embedding = weights(vocab, width, scale=1.0)
    embedding[:, CONSTANT] = 1.0
    embedding[:, SENTENCE_END] = 0.0
    embedding[full_stop, SENTENCE_END] = 1.0
    output = weights(vocab, width, scale=0.15)
    output[:, [CONSTANT, SENTENCE_END]] = 0.0
    silent = np.ones(vocab, dtype=bool)
    silent[said] = False
    output[silent, :] = 0.0
    output[silent, CONSTANT] = -30.0  # bytes, single characters and controls are never said
    output[end, CONSTANT], output[end, SENTENCE_END] = -8.0, 40.0
    output[full_stop, CONSTANT] = 1.0

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("continuity-tiny")
    writer.add_context_length(context_tokens)
    writer.add_embedding_length(width)
    writer.add_block_count(layers)
    writer.add_feed_forward_length(feed_forward)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(HEADS)
    writer.add_rope_dimension_count(width // HEADS)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(pieces)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(end)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    writer.add_chat_template(CHATML)

    writer.add_tensor("token_embd.weight", embedding)
    writer.add_tensor("output_norm.weight", np.ones(width, dtype=np.float32))
    writer.add_tensor("output.weight", output)
    for layer in range(layers):
        block = f"blk.{layer}"
        attention_out, down = weights(width, width), weights(width, feed_forward)
        # Nothing the layers compute reaches the two dimensions kept apart.
        attention_out[[CONSTANT, SENTENCE_END], :] = 0.0
        down[[CONSTANT, SENTENCE_END], :] = 0.0
        writer.add_tensor(f"{block}.attn_norm.weight", np.ones(width, dtype=np.float32))
        writer.add_tensor(f"{block}.ffn_norm.weight", np.ones(width, dtype=np.float32))
        for name in ("attn_q", "attn_k", "attn_v"):
            writer.add_tensor(f"{block}.{name}.weight", weights(width, width))
        writer.add_tensor(f"{block}.attn_output.weight", attention_out)
        writer.add_tensor(f"{block}.ffn_gate.weight", weights(feed_forward, width))
        writer.add_tensor(f"{block}.ffn_up.weight", weights(feed_forward, width))
        writer.add_tensor(f"{block}.ffn_down.weight", down)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
