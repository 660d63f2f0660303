"""The committed decode benchmark report (lessons_src/lab/artifacts/decode_bench.json) agrees with the cache
formulas in lessons_src.kv_cache."""

from __future__ import annotations

import torch

from lessons_src.kv_cache import kv_bytes_per_token, latent_bytes_per_token
from lessons_src.lab import read_artifact_json


def test_report_cache_bytes_equal_the_formulas() -> None:
    r = read_artifact_json("decode_bench.json")
    c = r["config"]
    tokens = c["B"] * (c["prompt"] + c["new_tokens"])
    E = c["d_model"] // c["num_heads"]
    expected = {name: kv_bytes_per_token(K, E, torch.float32) for name, K in c["num_kv_heads"].items()}
    mla = latent_bytes_per_token(c["mla"]["kv_latent_dim"], c["mla"]["rope_dim"], torch.float32)
    expected |= {"MLA absorbed": mla, "MLA naive": mla}
    assert set(r["cache"]) == set(expected)
    for name, per_token in expected.items():
        cache = r["cache"][name]
        assert cache["bytes_per_token"] == per_token
        assert cache["measured_bytes"] == cache["formula_bytes"] == tokens * per_token
        assert r["cache_ratio_to_mha"][name] == cache["measured_bytes"] / r["cache"]["MHA"]["measured_bytes"]
