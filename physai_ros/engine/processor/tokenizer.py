"""Prompt tokenizer: a local tokenizer.json loaded with the `tokenizers` package.

Nothing is fetched from a model hub at run time: the checkpoint's tokenizer file is named in
fleet.yaml. The embedded default is a small byte-level BPE of ours (assets/tokenizer.json), built
by `python -m physai_ros.engine.processor.tokenizer build`; byte-level so that any prompt encodes without
unknown tokens, and small so that it fits the tiny model's vocabulary.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

PAD, BOS, EOS = "<pad>", "<bos>", "<eos>"
DEFAULT_VOCAB_SIZE = 512

# Instructions of the kind robot tasks use; the BPE merges come from these words.
_CORPUS = [
    "pick up the red cube and place it in the bin",
    "pick up the blue block and put it on the plate",
    "wipe the table with the sponge",
    "open the drawer and take out the cup",
    "close the drawer",
    "fold the towel in half",
    "stack the green block on the yellow block",
    "push the button", "turn the valve to the left", "insert the peg into the hole",
    "move to inspect the package face", "check the product for defects",
    "pour water into the glass", "hand the tool to the operator",
    "grasp the handle and pull the door open", "place the bottle upright on the shelf",
    "sort the parts by color into the bins", "tighten the screw", "pick the apple from the bowl",
    "put the lid on the box", "slide the tray to the right", "lift the object and hold it",
]


@dataclass(frozen=True)
class EncodedPrompt:
    tokens: np.ndarray  # int64 [max_len]
    mask: np.ndarray  # bool [max_len]
    truncated: bool


def build_default_tokenizer(vocab_size: int = DEFAULT_VOCAB_SIZE) -> Tokenizer:
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=[PAD, BOS, EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(_CORPUS * 4, trainer=trainer)
    return tok


class PromptTokenizer:
    """Encodes a prompt to fixed-length token ids + mask, caching per prompt (prompts repeat)."""

    def __init__(self, path: str | Path, max_len: int, verbatim: bool = False):
        """verbatim=False: our checkpoints' convention (strip, lowercase, BOS prepended).
        verbatim=True: LeRobot's tokenizer step (the text as built; special tokens from the
        tokenizer file's post-processor, or a BOS prepended when it has none)."""
        p = Path(path)
        if not p.is_file():
            raise FileNotFoundError(f"tokenizer file not found: {p}")
        self._tok = Tokenizer.from_file(str(p))
        self.max_len = max_len
        self.path = p
        self.pad_id = self._tok.token_to_id(PAD)
        self.bos_id = self._tok.token_to_id(BOS)
        self.eos_id = self._tok.token_to_id(EOS)  # ends generated text (language stream)
        if self.pad_id is None:
            self.pad_id = 0
        self.verbatim = verbatim
        self._adds_specials = self._tok.post_processor is not None
        self._cache: dict[str, EncodedPrompt] = {}

    @property
    def vocab_size(self) -> int:
        return self._tok.get_vocab_size()

    def encode(self, prompt: str, cache: bool = True) -> EncodedPrompt:
        """cache=False for prompts that change with every observation (pi0.5 writes the state
        into its prompt), so they never crowd out the per-task ones."""
        hit = self._cache.get(prompt)
        if hit is not None:
            return hit
        if self.verbatim:
            ids = self._tok.encode(prompt).ids
            if not self._adds_specials and self.bos_id is not None:
                ids = [self.bos_id] + ids
        else:
            ids = self._tok.encode(prompt.strip().lower()).ids
            if self.bos_id is not None:
                ids = [self.bos_id] + ids
        truncated = len(ids) > self.max_len
        ids = ids[: self.max_len]
        tokens = np.full(self.max_len, self.pad_id, dtype=np.int64)
        tokens[: len(ids)] = ids
        mask = np.zeros(self.max_len, dtype=bool)
        mask[: len(ids)] = True
        enc = EncodedPrompt(tokens, mask, truncated)
        if cache and len(self._cache) < 1024:
            self._cache[prompt] = enc
        return enc

    def decode(self, tokens: np.ndarray, mask: np.ndarray) -> str:
        return self._tok.decode([int(t) for t, m in zip(tokens, mask) if m], skip_special_tokens=True)

    def encode_text(self, text: str) -> list[int]:
        """Text that continues a prompt (a question, an answer): normalised as prompts are, no
        BOS, no padding, no length limit (the caller bounds it)."""
        return self._tok.encode(text if self.verbatim else text.strip().lower(), add_special_tokens=False).ids

    def decode_ids(self, ids: list[int]) -> str:
        """Generated token ids -> text (special tokens dropped)."""
        return self._tok.decode([int(t) for t in ids], skip_special_tokens=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("command", choices=["build"])
    ap.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "assets" / "tokenizer.json"))
    ap.add_argument("--vocab-size", type=int, default=DEFAULT_VOCAB_SIZE)
    a = ap.parse_args(argv)
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    build_default_tokenizer(a.vocab_size).save(str(out))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
