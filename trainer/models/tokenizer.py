"""A character-level tokenizer built locally (no hub), saved as `tokenizer.json`.

One token per character of printable ASCII plus newline, and three special tokens
(pad, bos, eos). Encoding a string with special tokens prepends `<bos>` (as Llama and
Qwen do); pass `add_special_tokens=False` to get the bare characters. Both transformers
(`PreTrainedTokenizerFast`) and vLLM load it from the checkpoint directory.
It deliberately knows no chat template and no unknown characters: a character outside
the alphabet raises, rather than being silently mapped to an id that means nothing.
"""

from __future__ import annotations

import string

PAD, BOS, EOS = "<pad>", "<bos>", "<eos>"
SPECIALS = (PAD, BOS, EOS)  # ids 0, 1, 2
# digits, arithmetic symbols, letters, space, newline, punctuation: printable ASCII + "\n".
ALPHABET: tuple[str, ...] = tuple(
    dict.fromkeys(string.digits + "+-*/=()<>^%" + string.ascii_letters + " \n" + string.punctuation)
)


def build_char_tokenizer():
    """A `PreTrainedTokenizerFast` over SPECIALS + ALPHABET (99 tokens)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIALS + ALPHABET)}
    # WordLevel over single characters: every character is one word; no unk token, so an
    # unknown character fails loudly at encode time.
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.FixedLength(length=1)
    tok.decoder = decoders.Fuse()  # join characters without the default space
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A $B", special_tokens=[(BOS, vocab[BOS])]
    )
    tok.add_special_tokens(list(SPECIALS))
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token=PAD,
        bos_token=BOS,
        eos_token=EOS,
        padding_side="right",
        clean_up_tokenization_spaces=False,
        model_max_length=1 << 20,
    )
