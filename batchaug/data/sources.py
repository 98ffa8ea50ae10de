"""Where users keep photos, as map-style datasets: Hugging Face ``datasets`` and WebDataset shards.

``from_dataset`` and ``write_cache`` read any map-style dataset of ``(image, label)`` items. Two
common stores are not one as they stand; ``as_map_dataset`` wraps them:

- a Hugging Face ``datasets.Dataset`` with an ``Image`` column and a label column
  (``HuggingFaceImages``: the columns found by their feature types, or named);
- WebDataset tar shards, members ``KEY.jpg|jpeg|png|webp`` with ``KEY.cls`` (``TarShards``: one
  pass over the tar headers indexes them; each sample is then read with one ``pread``).

Both give each sample's stored bytes (``source_bytes(i)``), so a JPEG cache keeps a JPEG's own
bytes instead of encoding it again. Neither library is needed to import this module:
``datasets`` only for a ``datasets.Dataset`` (it is the user's object), and tar shards are read
with the standard library's ``tarfile``.
"""
from __future__ import annotations

import io
import os
import re
import tarfile
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

IMAGE_EXTENSIONS = ("jpg", "jpeg", "png", "webp")
PathLike = Union[str, "os.PathLike[str]"]


def decode_pil(data: Union[bytes, str], name: str):
    """``data`` (bytes, or a file's path) decoded as ImageFolder's loader decodes a file: fully
    (so that a truncated one fails here, by name), as RGB (a 16-bit PNG scaled, not clipped)."""
    from PIL import Image

    from batchaug.data.ingest import BadImageError, to_8bit

    try:
        with io.BytesIO(data) if isinstance(data, bytes) else open(data, "rb") as f:
            img = Image.open(f)
            img.load()
            return to_8bit(img, name).convert("RGB")
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
        raise BadImageError(f"{name}: cannot read image ({type(exc).__name__}: {exc})") from None


# --- Hugging Face datasets ------------------------------------------------------------------
def is_hf_dataset(obj: Any) -> bool:
    """A ``datasets.Dataset`` (checked by its type's module: ``datasets`` need not be
    installed for anything else)."""
    mod = type(obj).__module__ or ""
    return mod.split(".")[0] == "datasets" and hasattr(obj, "features") and \
        hasattr(obj, "cast_column")


class HuggingFaceImages:
    """A Hugging Face ``datasets.Dataset`` as ``(PIL image, label)`` items, for ``from_dataset``
    and ``write_cache`` (which wrap a ``datasets.Dataset`` in this by themselves).

    ``image_column``: the column of ``datasets.Image`` feature (None: the only such column);
    ``label_column``: a ``ClassLabel`` or integer column (None: the only ``ClassLabel`` column,
    else a column named ``label``/``labels``). ``classes`` are the ``ClassLabel``'s names.
    Images are decoded by the column's own feature (its ``mode``, if set, is applied); the
    stored bytes are read without decoding (``source_bytes``), so a JPEG cache keeps them.

    Example:
        >>> ds = datasets.load_from_disk("pets")                # doctest: +SKIP
        >>> cache = DeviceCache.from_dataset(HuggingFaceImages(ds, "img", "fine_label"),
        ...                                  storage="jpeg")    # doctest: +SKIP
    """

    def __init__(self, dataset: Any, image_column: Optional[str] = None,
                 label_column: Optional[str] = None) -> None:
        if not is_hf_dataset(dataset):
            raise TypeError(f"dataset must be a datasets.Dataset, got {type(dataset).__name__}")
        fmt = getattr(dataset, "format", None) or {}
        if fmt.get("type") == "custom":
            raise ValueError("dataset has a transform set (with_transform/set_transform): "
                             "batchaug reads the stored image bytes and labels itself, so it "
                             "cannot run a transform written for ds[i]'s dict; pass "
                             "dataset.with_format(None) and give per-image work as "
                             "pre_transform, or wrap it in a map-style dataset returning "
                             "(image, label) pairs")
        features = dataset.features
        kinds = {name: type(f).__name__ for name, f in features.items()}
        image_column = self._pick(kinds, image_column, "image_column", ("Image",), ())
        label_column = self._pick(kinds, label_column, "label_column", ("ClassLabel",),
                                  ("label", "labels"))
        dtype = str(getattr(features[label_column], "dtype", ""))
        if not (kinds[label_column] == "ClassLabel" or
                (kinds[label_column] == "Value" and dtype.startswith(("int", "uint")))):
            raise TypeError(f"label_column={label_column!r} is a {kinds[label_column]} column; "
                            f"expected a ClassLabel or integer column")
        self.image_column, self.label_column = image_column, label_column
        from datasets import Image as HFImage

        # the column's own decoder (its mode), decoding even where the column says decode=False
        self.feature = features[image_column]
        if not getattr(self.feature, "decode", True):
            self.feature = HFImage(mode=getattr(self.feature, "mode", None))
        self.rows = dataset.with_format(None).select_columns(
            [image_column, label_column]).cast_column(image_column, HFImage(decode=False))
        names = getattr(features[label_column], "names", None)
        self.classes: Optional[List[str]] = list(names) if names else None

    @staticmethod
    def _pick(kinds: Dict[str, str], name: Optional[str], arg: str, types: Tuple[str, ...],
              fallback: Tuple[str, ...]) -> str:
        if name is not None:
            if name not in kinds:
                raise ValueError(f"{arg}={name!r} is not a column; the columns are "
                                 f"{sorted(kinds)}")
            return name
        found = [c for c, k in kinds.items() if k in types]
        if len(found) == 1:
            return found[0]
        if not found:
            found = [c for c in fallback if c in kinds]
            if len(found) == 1:
                return found[0]
        raise ValueError(f"cannot tell which column is meant ({arg}): columns "
                         f"{ {c: k for c, k in kinds.items()} }; name it, e.g. "
                         f"HuggingFaceImages(dataset, {arg}=...)")

    def __len__(self) -> int:
        return len(self.rows)

    def _stored(self, i: int) -> Tuple[bytes, Any]:
        row = self.rows[int(i)]
        value = row[self.image_column]
        data = value.get("bytes")
        if data is None and value.get("path"):
            with open(value["path"], "rb") as f:
                data = f.read()
        if data is None:
            raise ValueError(f"{self.sample_name(i)}: the image column holds neither bytes "
                             f"nor a path")
        return data, row[self.label_column]

    def __getitem__(self, i: int):
        data, label = self._stored(i)
        image = self.feature.decode_example({"bytes": data, "path": None})
        image.load()
        return image, label

    def source_bytes(self, i: int) -> bytes:
        return self._stored(i)[0]

    def sample_name(self, i: int) -> str:
        return f"dataset[{i}] (column {self.image_column!r})"

    def __repr__(self) -> str:
        return (f"HuggingFaceImages({len(self)} rows, image_column={self.image_column!r}, "
                f"label_column={self.label_column!r})")


# --- WebDataset tar shards ------------------------------------------------------------------
_BRACE = re.compile(r"\{([^{}]*)\}")


def expand_shards(pattern: Union[PathLike, Sequence[PathLike]]) -> List[str]:
    """Shard paths from a list, or from one pattern with WebDataset's brace notation:
    ``train-{000000..000099}.tar`` (a zero-padded range) or ``{a,b}`` (a list).

    Example:
        >>> expand_shards("s-{00..02}.tar")
        ['s-00.tar', 's-01.tar', 's-02.tar']
    """
    if isinstance(pattern, (list, tuple)):
        out: List[str] = []
        for p in pattern:
            out += expand_shards(p)
        return out
    text = os.fspath(pattern)
    m = _BRACE.search(text)
    if m is None:
        return [text]
    body = m.group(1)
    rng = re.fullmatch(r"(\d+)\.\.(\d+)", body)
    if rng:
        a, b = rng.group(1), rng.group(2)
        if int(b) < int(a):
            raise ValueError(f"shard pattern {text!r}: the range {{{body}}} runs backwards")
        width = len(a) if a.startswith("0") or len(a) == len(b) else 0
        parts = [str(k).zfill(width) for k in range(int(a), int(b) + 1)]
    elif "," in body:
        parts = body.split(",")
    else:
        raise ValueError(f"shard pattern {text!r}: {{{body}}} is neither a range {{a..b}} nor "
                         f"a list {{x,y}}")
    out = []
    for part in parts:
        out += expand_shards(text[:m.start()] + part + text[m.end():])
    return out


def is_tar_source(obj: Any) -> bool:
    """A tar shard path, a list of them, or a brace pattern of them."""
    if isinstance(obj, (list, tuple)):
        return bool(obj) and all(is_tar_source(p) for p in obj)
    if isinstance(obj, (str, os.PathLike)):
        return os.fspath(obj).endswith(".tar") or bool(_BRACE.search(os.fspath(obj))
                                                       and ".tar" in os.fspath(obj))
    return False


def _dotted_hint(shards: Sequence[str]) -> str:
    """For the "no samples" error: a member whose file name has a dot before its extension
    (``x.v1.jpg``), which WebDataset's rule, the key up to the first dot, reads as key ``x``
    with extension ``v1.jpg``."""
    with tarfile.open(shards[0], "r:") as tar:
        for m in tar:
            base = os.path.basename(m.name)
            parts = base.split(".")
            if m.isfile() and len(parts) > 2 and parts[-1].lower() in IMAGE_EXTENSIONS + ("cls",):
                return (f"; member {base!r} is read as key {parts[0]!r} with extension "
                        f"{'.'.join(parts[1:])!r} (the key ends at the first dot, as "
                        f"WebDataset groups members): rename it without the inner dots, e.g. "
                        f"{'_'.join(parts[:-1]) + '.' + parts[-1]!r}")
    return ""


class TarShards:
    """WebDataset tar shards as a map-style dataset of ``(PIL image, label)`` items.

    A sample is the members sharing a key (the member name up to the first dot of its file
    name, as WebDataset groups them): its image ``KEY.jpg|jpeg|png|webp`` (decoded as RGB, as
    ImageFolder's loader does) and its class ``KEY.cls`` (an integer as text). One pass over the
    tar headers at construction indexes every sample (a few integers each, whatever the shards'
    size); each item is then one ``pread`` per member, so ``write_cache`` streams the shards
    with bounded memory, in workers, and resumes. Compressed tars (``.tar.gz``) cannot be read
    this way: unpack them first.

    Example:
        >>> shards = TarShards("train-{000000..000099}.tar")   # doctest: +SKIP
        >>> write_cache(shards, "train-cache", storage="jpeg")   # doctest: +SKIP
    """

    classes = None

    def __init__(self, shards: Union[PathLike, Sequence[PathLike]]) -> None:
        if not is_tar_source(shards):
            raise TypeError(f"shards must be a .tar path, a brace pattern of them or a list, "
                            f"got {shards!r}")
        self.shards = expand_shards(shards)
        rows: List[Tuple[int, int, int, int, int, int]] = []
        self.keys: List[str] = []
        for s, path in enumerate(self.shards):
            if not os.path.isfile(path):
                raise FileNotFoundError(f"{path}: no such shard")
            try:
                found = self._index(s, path)
            except tarfile.ReadError as exc:
                raise ValueError(f"{path}: not a readable uncompressed tar ({exc})") from None
            for key, row in found:
                self.keys.append(key)
                rows.append(row)
        if not rows:
            raise ValueError(f"no samples (KEY.jpg|jpeg|png|webp with KEY.cls) in "
                             f"{len(self.shards)} shard(s): {self.shards[:3]}"
                             + _dotted_hint(self.shards))
        #: per sample: shard, image offset, image size, class offset, class size, extension
        self.index = np.asarray(rows, dtype=np.int64)
        self._files: Dict[int, int] = {}

    @staticmethod
    def _index(s: int, path: str) -> List[Tuple[str, Tuple[int, int, int, int, int, int]]]:
        # WebDataset's grouping: consecutive members with one key form one sample (a key seen
        # again later starts a new sample); a suffix twice in one sample is an error.
        samples: List[Tuple[str, Dict[str, Tuple[int, int]]]] = []
        with tarfile.open(path, "r:") as tar:
            for m in tar:
                if not m.isfile():
                    continue
                d, base = os.path.split(m.name)
                if "." not in base:
                    continue
                stem, ext = base.split(".", 1)
                key = f"{d}/{stem}" if d else stem
                if not samples or samples[-1][0] != key:
                    samples.append((key, {}))
                parts = samples[-1][1]
                if ext.lower() in parts:
                    raise ValueError(f"{path}: sample {key!r} has two {ext!r} members in a "
                                     f"row; WebDataset refuses them too (rename one)")
                parts[ext.lower()] = (m.offset_data, m.size)
        out = []
        for key, parts in samples:
            exts = [e for e in IMAGE_EXTENSIONS if e in parts]
            if not exts and "cls" not in parts:
                continue  # a sample of other modalities only (e.g. .json, .txt)
            if not exts or "cls" not in parts:
                missing = "image (.jpg/.jpeg/.png/.webp)" if not exts else ".cls label"
                raise ValueError(f"{path}: sample {key!r} has no {missing}; its members: "
                                 f"{sorted(parts)}")
            img, cls = parts[exts[0]], parts["cls"]
            out.append((key, (s, img[0], img[1], cls[0], cls[1],
                              IMAGE_EXTENSIONS.index(exts[0]))))
        return out

    def __len__(self) -> int:
        return len(self.index)

    def __getstate__(self):  # open files stay in the process that opened them
        state = dict(self.__dict__)
        state["_files"] = {}
        return state

    def _read(self, shard: int, offset: int, size: int) -> bytes:
        fd = self._files.get(shard)
        if fd is None:
            fd = self._files[shard] = os.open(self.shards[shard], os.O_RDONLY)
        data = os.pread(fd, size, offset)
        if len(data) != size:
            raise ValueError(f"{self.shards[shard]}: truncated (a member ends past the file)")
        return data

    def source_bytes(self, i: int) -> bytes:
        s, off, size = (int(v) for v in self.index[i, :3])
        return self._read(s, off, size)

    def __getitem__(self, i: int):
        s, _, _, coff, csize, _ = (int(v) for v in self.index[i])
        text = self._read(s, coff, csize).decode("utf-8", "replace").strip()
        try:
            label = int(text)
        except ValueError:
            raise ValueError(f"{self.sample_name(i)}: its .cls holds {text[:40]!r}, not an "
                             f"integer class") from None
        return decode_pil(self.source_bytes(i), self.sample_name(i)), label

    def sample_name(self, i: int) -> str:
        return f"{self.shards[int(self.index[i, 0])]}:{self.keys[i]}"

    def __del__(self) -> None:
        for fd in getattr(self, "_files", {}).values():
            try:
                os.close(fd)
            except OSError:
                pass

    def __repr__(self) -> str:
        return f"TarShards({len(self.shards)} shard(s), {len(self)} samples)"


def as_map_dataset(dataset: Any) -> Any:
    """What ``from_dataset``/``write_cache`` read: a ``datasets.Dataset`` wrapped in
    ``HuggingFaceImages``, tar shards (a path, pattern or list) in ``TarShards``, anything else
    as it is."""
    if is_hf_dataset(dataset):
        return HuggingFaceImages(dataset)
    if is_tar_source(dataset):
        return TarShards(dataset)
    if isinstance(dataset, (str, os.PathLike)):
        raise ValueError(f"dataset={os.fspath(dataset)!r} is a path but not uncompressed tar "
                         f"shards: give a .tar path, a brace pattern of them "
                         f"('train-{{000..009}}.tar') or a list (unpack a .tar.gz first), or "
                         f"a map-style dataset object (e.g. torchvision's ImageFolder(path))")
    return dataset
