"""A pipeline component served by a Hugging Face `transformers` vision-language model.

The model lives in a local directory (a downloaded checkpoint such as SmolVLM-256M-Instruct, or a
tiny random one from hf_tiny.py); nothing is fetched from the hub. Each query becomes one chat
turn: the robot's views as images, then the component's question; the answer is the greedy
continuation, at most `query.max_tokens` new tokens, returned as raw text (the pipeline parses it).

transformers is imported when a backend is built, not when physai_ros.pipeline is: a fleet whose
components use the language-stream backend never pays for it.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Sequence

import numpy as np

from physai_ros.errors import UserInputError
from physai_ros.pipeline.backend import ComponentAnswer, ComponentQuery
from physai_ros.pipeline.hf_processor import load_processor

DEVICES = ("cpu", "cuda", "auto")
DTYPES = ("auto", "float32", "bfloat16")


class HFModelError(ValueError, UserInputError):
    """A model directory that cannot serve as a vision-language component (named in the message)."""


def _check_images(query: ComponentQuery) -> list[np.ndarray]:
    """The query's views as HxWx3 uint8 arrays, or ValueError saying what is wrong with them.
    Checked here, not left to the processor, so the error names the view instead of a tensor op."""
    if not query.images:
        raise ValueError("the query has no images (a vision-language component needs the robot's views)")
    out = []
    for i, img in enumerate(query.images):
        arr = np.asarray(img)
        if arr.ndim != 3 or arr.shape[2] != 3 or min(arr.shape[:2]) < 2:
            raise ValueError(f"image {i} has shape {arr.shape}; expected HxWx3")
        if arr.dtype != np.uint8:
            raise ValueError(f"image {i} has dtype {arr.dtype}; expected uint8")
        out.append(np.ascontiguousarray(arr))
    return out


class HFVisionLanguageBackend:
    """ComponentBackend over `AutoProcessor` + `AutoModelForImageTextToText` from a local directory.

    device: "cpu", "cuda" or "auto" (cuda where present). dtype: "auto" is bfloat16 on CUDA and
    float32 on CPU; "bfloat16" is accepted only on CUDA (CPU bf16 matmuls are slow and lose the
    exact batched == one-by-one agreement greedy decoding has in float32). max_batch bounds how
    many queries share one generate() call.
    """

    def __init__(self, model_dir: str | Path, device: str = "auto", dtype: str = "auto",
                 name: str = "", max_batch: int = 8) -> None:
        if device not in DEVICES:
            raise HFModelError(f"device {device!r} for {model_dir}: one of {', '.join(DEVICES)}")
        if dtype not in DTYPES:
            raise HFModelError(f"dtype {dtype!r} for {model_dir}: one of {', '.join(DTYPES)}")
        path = Path(model_dir).expanduser()
        if not path.is_dir():
            raise HFModelError(f"vision-language model directory {path} does not exist (or is not a directory)")
        if not (path / "config.json").is_file():
            raise HFModelError(f"{path} has no config.json: not a Hugging Face model directory")
        import torch
        import transformers

        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        if device == "cuda" and not torch.cuda.is_available():
            raise HFModelError(f"device 'cuda' for {path}, but torch sees no CUDA device")
        if dtype == "bfloat16" and device == "cpu":
            raise HFModelError(f"dtype 'bfloat16' for {path} on CPU: use float32 (or auto) on CPU")
        self.device = device
        self.dtype = torch.bfloat16 if (dtype == "bfloat16" or (dtype == "auto" and device == "cuda")) \
            else torch.float32
        self.path = path
        self.name = name or f"hf:{path.name}"
        self.max_batch = max(1, int(max_batch))
        try:
            config = transformers.AutoConfig.from_pretrained(path, local_files_only=True)
        except Exception as e:  # noqa: BLE001 - any failure to read the config is the user's directory
            raise HFModelError(f"{path}: cannot read its config.json as a transformers model: {e}") from e
        if type(config) not in transformers.MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING:
            raise HFModelError(f"{path} holds a {config.model_type!r} model, not a vision-language "
                               "(image-text-to-text) model")
        try:
            self.processor = load_processor(path)
            self.model = transformers.AutoModelForImageTextToText.from_pretrained(
                path, local_files_only=True, dtype=self.dtype).to(device).eval()
        except Exception as e:  # noqa: BLE001 - missing weights, tokenizer, processor files, ...
            raise HFModelError(f"{path}: cannot load it as a vision-language model: {type(e).__name__}: {e}") from e
        tok = getattr(self.processor, "tokenizer", None)
        if tok is None or not hasattr(self.processor, "image_processor"):
            raise HFModelError(f"{path}: its processor has no tokenizer and image processor")
        # Batched generation appends on the right, so prompts must be padded on the left.
        tok.padding_side = "left"
        self.tokenizer = tok
        gen = self.model.generation_config
        eos = gen.eos_token_id if gen.eos_token_id is not None else tok.eos_token_id
        self.eos_ids = set(eos if isinstance(eos, (list, tuple)) else [] if eos is None else [eos])
        self.pad_id = gen.pad_token_id if gen.pad_token_id is not None else \
            (tok.pad_token_id if tok.pad_token_id is not None else next(iter(self.eos_ids), 0))
        self.chat_template = bool(getattr(self.processor, "chat_template", None))

    # --- prompts -----------------------------------------------------------------------------

    def prompt(self, question: str, n_images: int) -> str:
        """The text for one query: the processor's chat template (one user turn: the views, then
        the question) where the model ships one; otherwise one image token per view before the
        question, the plain format PaliGemma-style processors expand (and add their BOS to)."""
        if self.chat_template:
            content = [{"type": "image"}] * n_images + [{"type": "text", "text": question}]
            return self.processor.apply_chat_template([{"role": "user", "content": content}],
                                                      add_generation_prompt=True, tokenize=False)
        image_token = getattr(self.processor, "image_token", None) or "<image>"
        return image_token * n_images + question

    # --- answering ---------------------------------------------------------------------------

    def answer(self, queries: Sequence[ComponentQuery]) -> list[ComponentAnswer]:
        answers: list[ComponentAnswer | None] = [None] * len(queries)
        good: list[tuple[int, list[np.ndarray]]] = []
        for i, q in enumerate(queries):
            try:
                if not isinstance(q.question, str):
                    raise ValueError(f"question is a {type(q.question).__name__}, not text")
                if int(q.max_tokens) < 1:
                    raise ValueError(f"max_tokens is {q.max_tokens}; at least 1")
                good.append((i, _check_images(q)))
            except Exception as e:  # noqa: BLE001 - a bad query is an error answer, never a raise
                answers[i] = ComponentAnswer(error=f"{type(e).__name__}: {e}")
        for start in range(0, len(good), self.max_batch):
            chunk = good[start:start + self.max_batch]
            try:
                out = self._generate([queries[i] for i, _ in chunk], [imgs for _, imgs in chunk])
            except Exception:  # noqa: BLE001 - retry one by one: one bad query must not cost the others
                out = []
                for i, imgs in chunk:
                    try:
                        out += self._generate([queries[i]], [imgs])
                    except Exception as e:  # noqa: BLE001
                        out.append(ComponentAnswer(error=f"{type(e).__name__}: {e}"))
            for (i, _), a in zip(chunk, out):
                answers[i] = a
        return [a if a is not None else ComponentAnswer(error="not answered") for a in answers]

    def _generate(self, queries: list[ComponentQuery], images: list[list[np.ndarray]]) -> list[ComponentAnswer]:
        """One generate() call for `queries`; greedy to the largest max_tokens, each answer then
        cut at its own max_tokens and first end-of-sequence token (greedy decoding makes a row's
        first n tokens independent of how many more are generated)."""
        import torch

        t0 = time.perf_counter()
        texts = [self.prompt(q.question, len(imgs)) for q, imgs in zip(queries, images)]
        inputs = self.processor(text=texts, images=images, padding=True, return_tensors="pt")
        inputs.pop("labels", None)  # PaliGemma's processor adds training labels; generate() needs none
        inputs = inputs.to(self.device)
        for k, v in inputs.items():  # pixel values in the model's dtype; ids and masks stay integers
            if torch.is_tensor(v) and v.is_floating_point():
                inputs[k] = v.to(self.dtype)
        limit = max(int(q.max_tokens) for q in queries)
        with torch.inference_mode():
            seqs = self.model.generate(**inputs, max_new_tokens=limit, min_new_tokens=0, do_sample=False,
                                       num_beams=1, pad_token_id=self.pad_id,
                                       eos_token_id=sorted(self.eos_ids) or None)
        new = seqs[:, inputs["input_ids"].shape[1]:].tolist()
        latency_ms = (time.perf_counter() - t0) * 1e3
        out = []
        for q, row in zip(queries, new):
            row = row[:int(q.max_tokens)]
            stop = next((j for j, t in enumerate(row) if t in self.eos_ids), None)
            tokens = row if stop is None else row[:stop + 1]  # the EOS was generated: it counts
            text = self.tokenizer.decode(tokens, skip_special_tokens=True)
            out.append(ComponentAnswer(text=text, tokens=len(tokens), latency_ms=latency_ms,
                                       meta={"batch": len(queries), "token_ids": tokens}))
        return out

    def close(self) -> None:
        """Drop the model (and its GPU memory) now rather than at garbage collection."""
        self.model = None
        self.processor = None
        if self.device == "cuda":
            import torch

            torch.cuda.empty_cache()
