"""Dataset names that `datasets` reads from the local disk, not from the Hub: refused for jobs.

`datasets.load_dataset("csv")` (or json, text, parquet, ...) is one of the library's packaged builders;
given no data_files it reads every matching file under the working directory. A job names calibration
data by Hub id (`owner/name`, or a canonical name) or by the offline names c4 / wikitext2, so a
builder name is never what a job means, and is refused at submit (a 422) and again by the worker.

The API never imports `datasets` (nor torch), hence a static list; tests check that it covers the
installed package's `datasets.packaged_modules._PACKAGED_DATASETS_MODULES`. The last four are builders
that `datasets` keeps outside that table (they need arguments), listed so a later release that adds
them to it changes nothing here.
"""

from __future__ import annotations

LOCAL_DATA_SUFFIXES = (
    ".json",
    ".jsonl",
    ".txt",
    ".parquet",
)  # worker.engine.calibration.data.LOCAL_SUFFIXES: read as files
PACKAGED_BUILDERS = frozenset(
    {
        "arrow",
        "audiofolder",
        "conll",
        "csv",
        "eval",
        "fasta",
        "fastq",
        "genbank",
        "harbor",
        "hdf5",
        "iceberg",
        "imagefolder",
        "json",
        "lance",
        "meshfolder",
        "mmcif",
        "niftifolder",
        "pandas",
        "parquet",
        "pdb",
        "pdffolder",
        "text",
        "tsfile",
        "videofolder",
        "vortex",
        "webdataset",
        "xml",
        "cache",
        "generator",
        "spark",
        "sql",
    }
)


def is_packaged_builder(name: str) -> bool:
    """Case-insensitive: the Hub resolves names case-insensitively, and a refusal should not hinge on case."""
    return name.strip().lower() in PACKAGED_BUILDERS


def refuse_local_reader(name: str) -> str:
    """The API's rule: neither a file name nor a packaged builder (ValueError: a 422)."""
    if name.lower().endswith(LOCAL_DATA_SUFFIXES):
        raise ValueError(f"{name!r} names a file; calibration data is a Hub dataset id, c4 or wikitext2")
    return refuse_packaged_builder(name)


def refuse_packaged_builder(name: str, error: type[ValueError] = ValueError) -> str:
    if is_packaged_builder(name):
        raise error(
            f"dataset {name!r} is a built-in loader of the `datasets` library that reads local files, "
            "not a dataset: give a Hub dataset id (owner/name), c4 or wikitext2"
        )
    return name
