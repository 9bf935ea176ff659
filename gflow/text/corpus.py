"""Text corpora: local files and folders, and (opt-in, online) Hugging Face corpora.

Nothing downloads unless asked: a hub name needs ``download=True`` and the optional
``datasets`` package (``pip install gflow[hf]``), imported only then. A small text
ships with the package (``PACKAGED_CORPORA``), so that the text commands and the
documentation's examples run offline, from any folder.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

#: Corpora shipped with gflow, by name: the file under ``gflow/text/data/`` (package
#: data; its licence note, ``TINYSTORIES_LICENSE.md``, lies beside it).
#: ``tinystories-excerpt``: the first 94 765 bytes of TinyStories' validation split
#: (CDLA-Sharing-1.0), about 900 stories' lines and 18 600 words.
PACKAGED_CORPORA = {"tinystories-excerpt": "tinystories_excerpt.txt"}

#: Hub corpora by short name: (dataset path, config name or None, text column).
HUB_CORPORA = {
    "wikitext": ("wikitext", "wikitext-2-raw-v1", "text"),
    "wikitext-2-raw-v1": ("wikitext", "wikitext-2-raw-v1", "text"),
    "tinystories": ("roneneldan/TinyStories", None, "text"),
    "roneneldan/TinyStories": ("roneneldan/TinyStories", None, "text"),
}

_LOCAL_HINT = (
    "pass a local text file or folder instead, or the text shipped with gflow: "
    "--corpus tinystories-excerpt"
)


def corpus_path(name: str = "tinystories-excerpt") -> Path:
    """The path of a corpus shipped with gflow (``PACKAGED_CORPORA``), for commands
    and libraries that want a file: ``gflow text --corpus "$(python -c 'import
    gflow.text; print(gflow.text.corpus_path())')"``. The name itself works wherever
    a corpus is read (``load_corpus``, ``gflow text --corpus``, ``gflow train
    --data``).

    Raises:
        ValueError: a name that is not in ``PACKAGED_CORPORA``.
    """
    if name not in PACKAGED_CORPORA:
        raise ValueError(
            f"no corpus {name!r} ships with gflow; the shipped ones are "
            f"{sorted(PACKAGED_CORPORA)}"
        )
    # an installed wheel is unpacked on disk, so the resource is a real file
    return Path(str(resources.files("gflow.text") / "data" / PACKAGED_CORPORA[name]))


def _read_text_file(path: str | Path) -> str:
    """The text of the file at ``path``, strictly UTF-8 and free of NUL bytes.

    A file that is not text (a model, an archive, an image, text in another
    encoding) is refused rather than read with replacement characters: ValueError
    in one line naming the file and the byte offset of its first bad byte.
    """
    path = Path(path)
    data = path.read_bytes()
    nul = data.find(b"\0")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        if nul == -1 or e.start < nul:
            raise ValueError(
                f"corpus {path} is not text: byte 0x{data[e.start]:02x} at byte "
                f"offset {e.start} is not UTF-8; give a UTF-8 text file"
            ) from None
    if nul != -1:
        raise ValueError(
            f"corpus {path} is not text: a NUL byte at byte offset {nul}; give a "
            "UTF-8 text file"
        )
    return text


def _read_folder(folder: Path) -> str:
    files = sorted(
        p
        for p in folder.rglob("*")
        if p.is_file() and p.suffix in {".txt", ".tokens", ".raw"}
    )
    if not files:
        raise ValueError(f"corpus folder {folder} holds no .txt/.tokens/.raw files")
    return "\n".join(_read_text_file(p) for p in files)


def _load_hub(name: str, split: str, max_chars: int | None) -> str:
    path, config, column = HUB_CORPORA[name]
    try:
        import datasets
    except ImportError:
        raise ValueError(
            f"corpus {name!r} needs the optional package 'datasets' "
            f"(pip install gflow[hf]); or {_LOCAL_HINT}"
        ) from None
    try:
        ds = datasets.load_dataset(path, config, split=split, streaming=True)
        parts, size = [], 0
        for row in ds:
            parts.append(row[column])
            size += len(row[column]) + 1
            if max_chars is not None and size >= max_chars:
                break
    except Exception as e:  # offline, unknown split, hub errors: one line for the CLI
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(
            f"could not load {name!r} from the Hugging Face hub ({first}); "
            + _LOCAL_HINT
        ) from None
    return "\n".join(parts)


def load_corpus(
    source: str | Path,
    *,
    split: str = "validation",
    max_chars: int | None = None,
    download: bool = False,
) -> str:
    """The text of a corpus.

    Args:
        source: a local text file, a folder (its ``.txt``/``.tokens``/``.raw`` files in
            sorted order, joined by newlines), the name of a corpus shipped with
            gflow (``PACKAGED_CORPORA``: ``"tinystories-excerpt"``) or a hub name
            from ``HUB_CORPORA`` (``"wikitext"`` = wikitext-2-raw-v1,
            ``"tinystories"``). A local file or folder of that name comes first.
        split: the hub split (local sources ignore it).
        max_chars: keep at most this many characters (the start of the corpus).
        download: allow a hub corpus to be fetched. Off by default so nothing
            downloads at run time unless asked.

    Raises:
        ValueError: unknown source, empty text, a local file that is not text
            (not UTF-8, or holding a NUL byte: the message names the file and the
            byte offset of its first bad byte), or a hub corpus that cannot be
            loaded (no ``download=True``, no ``datasets`` package, offline), in
            one line.
    """
    if max_chars is not None and max_chars < 1:
        raise ValueError(f"max_chars must be positive or None, got {max_chars}")
    path = Path(source)
    if path.is_file():
        text = _read_text_file(path)
    elif path.is_dir():
        text = _read_folder(path)
    elif str(source) in PACKAGED_CORPORA:
        text = _read_text_file(corpus_path(str(source)))
    elif str(source) in HUB_CORPORA:
        if not download:
            raise ValueError(
                f"corpus {str(source)!r} is a Hugging Face corpus: allow the download "
                f"with download=True (CLI: --download), or {_LOCAL_HINT}"
            )
        text = _load_hub(str(source), split, max_chars)
    else:
        raise ValueError(
            f"corpus {str(source)!r} is neither a file, a folder nor one of "
            f"{sorted(PACKAGED_CORPORA) + sorted(HUB_CORPORA)}; {_LOCAL_HINT}"
        )
    if max_chars is not None:
        text = text[:max_chars]
    if not text.strip():
        raise ValueError(f"corpus {str(source)!r} is empty")
    return text
