#!/usr/bin/env python3
"""Writes the seed corpora fuzz/corpus/<op>/ (deterministic: rerunning gives the same files).

The fuzz targets read their input as a stream of decisions in which 0 always selects the most
common valid choice (see fuzz/fuzz_common.h), so the seeds are: one all-zero input (the plain
valid call of each operator), and inputs of pseudo-random bytes of a few lengths, which decode
to every mode, dtype and layout with the occasional broken argument. Long seeds matter: they let
libFuzzer mutate late decisions (slot values, compress runs) from the first run on.

    python3 fuzz/make_corpus.py          # rewrites the seed-* files of fuzz/corpus/

Inputs that once found a bug are kept next to the seeds as regression-* files (not rewritten).
"""
import pathlib
import random

OPS = ["scatter_pa_kv_cache", "scatter_pa_kv_cache_with_k_scale", "kv_compress_epilog",
       "kv_cache_update", "gather_pa_kv_cache", "scatter_pa_cache", "indexer_quant_cache",
       "paged_kv_write", "paged_cache_gather", "paged_latent_write"]
LENGTHS = [16, 48, 128, 384, 1024]
PER_LENGTH = 8


def main():
    root = pathlib.Path(__file__).resolve().parent / "corpus"
    for op_index, op in enumerate(OPS):
        out = root / op
        out.mkdir(parents=True, exist_ok=True)
        for old in out.glob("seed-*"):
            old.unlink()
        (out / "seed-zero").write_bytes(bytes(64))
        rng = random.Random(1000 + op_index)
        for length in LENGTHS:
            for i in range(PER_LENGTH):
                data = bytes(rng.getrandbits(8) for _ in range(length))
                (out / f"seed-{length:04d}-{i}").write_bytes(data)


if __name__ == "__main__":
    main()
