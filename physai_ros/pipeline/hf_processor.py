"""Loading a vision-language model's processor from a local directory, images only if need be.

transformers 5 builds every processor attribute at load, and Qwen-VL-style processors have a
video processor, whose classes all need torchvision (transformers issue #48558). Here torchvision
is not installed: PyPI ships it as a CUDA build that does not import beside the CPU torch 2.13.
Pipeline components only ever send images, so when the normal load fails for that reason the
processor is rebuilt from its tokenizer, image processor and chat template with no video processor.
Where torchvision is installed (a CUDA machine) the normal path is taken and this never runs.
"""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path


@lru_cache(maxsize=None)
def image_only(cls: type) -> type:
    """`cls` (a ProcessorMixin with a video_processor attribute) without it: video_processor is
    dropped from its attributes, so it is neither type-checked, saved nor loaded (and reads None).
    Same class name, so save_pretrained writes the real processor_class for a later load."""

    def get_attributes(c):
        return [a for a in cls.get_attributes() if a != "video_processor"]

    return type(cls.__name__, (cls,), {"get_attributes": classmethod(get_attributes), "video_processor": None,
                                       "__module__": cls.__module__})


def _chat_template(path: Path, tokenizer) -> str | None:
    """Where save_pretrained (v5: chat_template.jinja; v4: chat_template.json) or the tokenizer keeps it."""
    if (path / "chat_template.jinja").is_file():
        return (path / "chat_template.jinja").read_text()
    if (path / "chat_template.json").is_file():
        return json.loads((path / "chat_template.json").read_text()).get("chat_template")
    return getattr(tokenizer, "chat_template", None)


def _processor_class(path: Path) -> str | None:
    for name in ("processor_config.json", "preprocessor_config.json", "tokenizer_config.json"):
        f = path / name
        if f.is_file():
            cls = json.loads(f.read_text()).get("processor_class")
            if cls:
                return cls
    return None


def load_processor(path: Path):
    """AutoProcessor.from_pretrained(path), local files only; without torchvision, a processor
    whose only torchvision need is its video processor is loaded without one."""
    import transformers
    from transformers.utils import is_torchvision_available

    try:
        return transformers.AutoProcessor.from_pretrained(path, local_files_only=True)
    except Exception:
        name = _processor_class(path)
        cls = getattr(transformers, name, None) if name else None
        if is_torchvision_available() or cls is None or "video_processor" not in cls.get_attributes():
            raise
    tokenizer = transformers.AutoTokenizer.from_pretrained(path, local_files_only=True)
    images = transformers.AutoImageProcessor.from_pretrained(path, local_files_only=True)
    return image_only(cls)(image_processor=images, tokenizer=tokenizer, video_processor=None,
                           chat_template=_chat_template(path, tokenizer))
