"""lessons_src.lab.long_context, and the long-context lessons' claims and quiz answers checked against the code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from lessons_src.lab import toy_models
from lessons_src.lab.heads import first_token_mass
from lessons_src.lab.long_context import receptive_field, toy_logits_with_mask
from lessons_src.masks import causal_mask

ROOT = Path(__file__).resolve().parents[2]
import train_indexer  # noqa: E402


@pytest.mark.parametrize(("window", "layers"), [(1, 3), (2, 5), (4, 6), (7, 3)])
def test_receptive_field_grows_by_window_minus_one_per_layer(window: int, layers: int) -> None:
    assert receptive_field(window, layers, 64) == [min(64, n * (window - 1) + 1) for n in range(1, layers + 1)]


def test_receptive_field_is_capped_by_the_sequence_and_checks_sizes() -> None:
    assert receptive_field(8, 5, 10) == [8, 10, 10, 10, 10]
    with pytest.raises(ValueError, match="window must be at least 1"):
        receptive_field(0, 2, 8)
    with pytest.raises(ValueError, match=r"(num_layers|length) must be at least 1"):
        receptive_field(2, 0, 8)


def test_first_token_mass_counts_only_the_chosen_real_queries() -> None:
    w = torch.zeros(1, 2, 1, 3, 3)
    w[..., 0] = 0.5  # every query: half its weight on key 0
    w[0, 1, 0, 2, 0] = 0.0  # a padding row of sequence 1 (length 2) that must not count
    assert first_token_mass(w, torch.tensor([3, 2])).tolist() == [[0.5]]
    w[0, :, 0, 0, 0] = 1.0  # query 0 sees only key 0; from_query=1 leaves it out
    assert first_token_mass(w, torch.tensor([3, 2]), from_query=1).tolist() == [[0.5]]


def test_toy_forward_with_the_causal_mask_is_the_model() -> None:
    model = toy_models.load_induction_model()
    tokens = toy_models.repeated_random_tokens(12, model.cfg.vocab_size, seed=3, batch=2)
    with torch.no_grad():
        want, _ = model(tokens)
    torch.testing.assert_close(toy_logits_with_mask(model, tokens, causal_mask(tokens.shape[1])), want)


def test_sinks_page_claims_hold() -> None:
    """MiniLM's [CLS] gets several times the uniform share and evicting it moves the embedding more than evicting
    two words; the toy model gives its first token only a small multiple of the uniform share."""
    from lessons_src.lab import minilm
    from lessons_src.lab.long_context import minilm_eviction_cosines, minilm_sink_shares, toy_window_eviction

    model, tok = minilm.load()
    shares = minilm_sink_shares(model, tok)
    assert all(cls > 3 * uniform for cls, _, uniform in shares[1:])
    sinks, words = minilm_eviction_cosines(model, tok, "sinks"), minilm_eviction_cosines(model, tok, "words")
    assert all(s < w for s, w in zip(sinks, words, strict=True))
    with pytest.raises(ValueError, match="which must be one of 'sinks', 'words'; got which='cls'"):
        minilm_eviction_cosines(model, tok, "cls")
    r = toy_window_eviction(toy_models.load_induction_model(), n=24, window=28, sink_tokens=[0, 1])
    assert float(r["first_token"].max()) < 3 * r["uniform"]  # type: ignore[attr-defined, operator]
    assert [row[0] for row in r["windowed"]] == [0, 1]  # type: ignore[attr-defined]


def test_weight_outside_the_window_is_measured_on_the_hidden_keys_only() -> None:
    # The toy model's induction layer spreads weight over keys older than the window; the lesson explains its
    # windowed loss with this number. A window as long as the sequence hides nothing; a window of 1 hides every
    # key but the query's own, so all the weight that is not on the diagonal counts.
    from lessons_src.lab.long_context import toy_window_eviction

    model = toy_models.load_induction_model()
    n = 8
    assert toy_window_eviction(model, n=n, window=2 * n, sink_tokens=[0])["outside_window"].abs().max() == 0  # type: ignore[attr-defined]
    r = toy_window_eviction(model, n=n, window=1, sink_tokens=[0])
    tokens = toy_models.repeated_random_tokens(n, model.cfg.vocab_size, seed=1, batch=32)
    with torch.no_grad():
        weights = model(tokens, need_weights=True)[1]  # (L, B, H, T, T)
    off_diagonal = 1 - weights.diagonal(dim1=-2, dim2=-1)[..., n:].mean(dim=(1, 2, 3))  # (L,)
    torch.testing.assert_close(r["outside_window"], off_diagonal)
    assert 0.1 < float(toy_window_eviction(model, n=24, window=28, sink_tokens=[0])["outside_window"][1]) < 1  # type: ignore[index]


def test_quiz_receptive_field_answer_is_computed() -> None:
    quiz = json.loads((ROOT / "docs" / "_data" / "quiz.json").read_text())["questions"]
    q = next(q for q in quiz if q["id"] == "window-receptive-field")
    assert "3 layers" in q["prompt"] and "window of 4" in q["prompt"]
    correct = next(o["text"] for o in q["options"] if o["correct"])
    assert correct == str(receptive_field(4, 3, 64)[-1])


# --- attention over chosen keys: the text model with each query's top-k keys, and an indexer's cost -------------


def test_the_text_model_with_its_top_k_keys() -> None:
    """At k = T the selection is everything and the loss is the dense loss; below it the kept weight shrinks with k
    and the loss rises; the pick is one per layer, shared by the heads."""
    from lessons_src.lab.long_context import text_model_top_k
    from lessons_src.lab.text_model import corpus_bytes, load_text_model, spaced_windows, split_corpus, text_loss

    model = load_text_model().eval()
    windows = spaced_windows(split_corpus(corpus_bytes(), 0.1)[1], 8, model.cfg.max_len + 1)
    with torch.no_grad():
        dense = float(text_loss(model, windows).mean())
    results = [text_model_top_k(model, windows, k) for k in (2, 8, model.cfg.max_len)]
    assert results[-1].loss == pytest.approx(dense, abs=1e-5) and results[-1].weight_kept == pytest.approx(1.0)
    assert [r.weight_kept for r in results] == sorted(r.weight_kept for r in results)
    assert results[0].weight_kept < 0.9 and results[0].loss > dense + 0.1


def test_an_indexers_costs_are_what_the_operations_count() -> None:
    """FLOPs as torch's own counter counts the operations (one query over S rows at DeepSeek-V3.2's sizes), and the
    dense bytes as the package's latent cache holds them; the indexer's share grows with the context."""
    from torch.utils.flop_counter import FlopCounterMode

    from lessons_src.kv_cache import LatentCache
    from lessons_src.lab.configs import load_configs
    from lessons_src.lab.long_context import selection_costs
    from lessons_src.sparse_selection import lightning_indexer_scores

    cfg = load_configs()["DeepSeek-V3.2"]
    assert cfg.mla is not None and cfg.sparse is not None
    H, C, R = cfg.num_heads, cfg.mla["kv_latent_dim"], cfg.mla["rope_dim"]
    Hi, Di = cfg.sparse["indexer_heads"], cfg.sparse["indexer_head_dim"]
    S = 300
    with FlopCounterMode(display=False) as counted:
        weights = torch.randn(1, H, C + R) @ torch.randn(1, S, C + R).transpose(1, 2)  # absorbed scores (1, H, S)
        weights @ torch.randn(1, S, C)  # the weighted latents (1, H, C)
    with FlopCounterMode(display=False) as indexed:
        lightning_indexer_scores(torch.randn(1, Hi, 1, Di), torch.randn(1, S, Di), torch.randn(1, Hi, 1))
    cost = selection_costs(cfg, S)
    assert cost["dense_flops"] == counted.get_total_flops()
    assert cost["indexer_flops"] == indexed.get_total_flops()
    cache = LatentCache(1, C, R, max_len=S, dtype=torch.bfloat16)
    cache.update(torch.zeros(1, S, C, dtype=torch.bfloat16), torch.zeros(1, S, R, dtype=torch.bfloat16))
    assert cost["dense_bytes"] == cache.nbytes
    short, long = selection_costs(cfg, cfg.sparse["top_k"]), selection_costs(cfg, 131072)
    assert short["sparse_flops"] == short["dense_flops"] + short["indexer_flops"]  # nothing left out yet
    assert long["sparse_flops"] < long["dense_flops"] / 10 and long["sparse_bytes"] < long["dense_bytes"] / 5
    with pytest.raises(ValueError, match="Llama 3 8B has no MLA latent or no lightning indexer"):
        selection_costs(load_configs()["Llama 3 8B"], 10)


def test_nsas_costs_are_what_its_three_branches_count() -> None:
    """NSA's decoding step built from tensors at the paper's sizes: the pooled blocks as unfold cuts them
    (equation 6), the selected blocks and the window, each branch with keys and values of its own; FLOPs as torch's
    counter counts the two products per branch, bytes as the branches' tensors hold them."""
    from torch.utils.flop_counter import FlopCounterMode

    from lessons_src.lab.configs import load_configs
    from lessons_src.lab.long_context import native_sparse_costs

    cfg = load_configs()["NSA 27B"]
    nsa = cfg.native_sparse
    assert nsa is not None
    H, K, E, Ev = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.value_dim
    for t in (20, 700, 3000):  # below one block, below the selection's 1,024 positions, above both
        blocks = torch.arange(t).unfold(0, nsa["compress_block"], nsa["compress_stride"]).shape[0] if t >= nsa[
            "compress_block"] else 0
        branches = [blocks, min(t, nsa["selected_blocks"] * nsa["select_block"]), min(t, nsa["window"])]
        with FlopCounterMode(display=False) as counted:
            for rows in branches:
                torch.randn(1, H, 1, E) @ torch.randn(1, H, E, rows) @ torch.randn(1, H, rows, Ev)
        held = sum(torch.zeros(K, rows, E + Ev, dtype=torch.bfloat16).nbytes for rows in branches)
        cost = native_sparse_costs(cfg, t)
        assert cost["sparse_flops"] == counted.get_total_flops() + H * blocks  # + summing each group's weights
        assert cost["sparse_bytes"] == held and cost["indexer_bytes"] == K * blocks * (E + Ev) * 2
        assert cost["dense_bytes"] == torch.zeros(K, t, E + Ev, dtype=torch.bfloat16).nbytes
    with pytest.raises(ValueError, match="Llama 3 8B has no NSA layers"):
        native_sparse_costs(load_configs()["Llama 3 8B"], 10)


def test_deepseek_v4s_costs_are_what_its_layers_count() -> None:
    """A compressed sparse layer: the indexer over every pooled entry, then attention over its top-k and the window;
    a heavily compressed layer: every pooled entry and the window. One tensor is key and value."""
    from torch.utils.flop_counter import FlopCounterMode

    from lessons_src.lab.configs import load_configs
    from lessons_src.lab.long_context import compressed_costs
    from lessons_src.sparse_selection import lightning_indexer_scores

    cfg = load_configs()["DeepSeek-V4-Flash"]
    assert cfg.compress is not None and cfg.sparse is not None and cfg.sliding_window is not None
    H, E, Hi, Di = cfg.num_heads, cfg.head_dim, cfg.sparse["indexer_heads"], cfg.sparse["indexer_head_dim"]
    t = 5000
    for kind, rate in cfg.compress.items():
        entries = t // rate
        rows = (min(cfg.sparse["top_k"], entries) if kind == "compressed_sparse" else entries) + cfg.sliding_window
        with FlopCounterMode(display=False) as counted:
            kv = torch.randn(1, rows, E)  # the key is the value
            torch.randn(1, H, E) @ kv.transpose(1, 2) @ kv
            if kind == "compressed_sparse":
                lightning_indexer_scores(torch.randn(1, Hi, 1, Di), torch.randn(1, entries, Di), torch.randn(1, Hi, 1))
        cost = compressed_costs(cfg, t, kind)
        assert cost["sparse_flops"] == counted.get_total_flops(), kind
        assert cost["sparse_bytes"] == rows * E * 2 + (entries * Di if kind == "compressed_sparse" else 0), kind
    with pytest.raises(ValueError, match="no 'compressed_sparse' layers"):
        compressed_costs(load_configs()["Llama 3 8B"], 10)
    with pytest.raises(ValueError, match=r"context must be at least 1 \(tokens\)"):
        compressed_costs(cfg, 0)


# --- the lightning indexer fitted to the text model (tools/train/train_indexer.py, `make train-indexer`) ---------


def test_the_indexer_picks_what_deepseek_v32s_indexer_picks() -> None:
    """Our LightningIndexer with transformers' DeepseekV32Indexer's weights (its low-rank query path fed the same
    input as the rest, since the text model has none) picks the same top-k keys: projections, key LayerNorm, RoPE
    on the first rope_dim features, head weights times Hi**-0.5."""
    import warnings

    from transformers import DeepseekV32Config
    from transformers.models.deepseek_v32 import modeling_deepseek_v32 as hf

    from lessons_src.lab.long_context import IndexerConfig, LightningIndexer
    from lessons_src.sparse_selection import top_k_mask

    D, T, top_k = 32, 20, 4
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = DeepseekV32Config(hidden_size=D, num_attention_heads=2, num_key_value_heads=2, q_lora_rank=D,
                                kv_lora_rank=8, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=8,
                                index_n_heads=4, index_head_dim=16, index_topk=top_k, vocab_size=16,
                                num_hidden_layers=1, rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    torch.manual_seed(0)
    theirs = hf.DeepseekV32Indexer(cfg, layer_idx=0).eval()
    for p in theirs.parameters():
        torch.nn.init.normal_(p, std=0.5)
    ours = LightningIndexer(IndexerConfig(d_model=D, indexer_heads=4, indexer_head_dim=16, rope_dim=8)).eval()
    for name in ("wk", "k_norm", "weights_proj"):
        getattr(ours, name).load_state_dict(getattr(theirs, name).state_dict())
    ours.wq.load_state_dict(theirs.wq_b.state_dict())
    x = torch.randn(2, T, D)
    cos, sin = hf.DeepseekV32RotaryEmbedding(cfg)(x, torch.arange(T)[None].expand(2, T))
    with torch.no_grad():
        picked = theirs(x, x, (cos, sin), causal_mask(T)[None].expand(2, T, T), None)  # (B, T, top_k) indices
        keep = top_k_mask(ours(x), top_k)[:, 0]  # (B, T, T)
    want = torch.zeros(2, T, T, dtype=torch.bool).scatter_(-1, picked.long(), True) & causal_mask(T)
    assert torch.equal(keep, want)
    assert ours.k_norm.eps == theirs.k_norm.eps


def test_indexer_kl_is_the_kl_divergence_over_the_visible_keys() -> None:
    from lessons_src.lab.long_context import indexer_kl

    torch.manual_seed(0)
    scores = torch.randn(2, 5, 7)
    target = torch.rand(2, 5, 7).masked_fill(~causal_mask(5, 7), 0.0)
    target = target / target.sum(-1, keepdim=True)
    got = indexer_kl(scores, target)  # (2, 5)
    for t in range(5):  # query t sees keys 0 .. t + 2
        seen = slice(0, t + 3)
        want = torch.nn.functional.kl_div(scores[:, t, seen].log_softmax(-1), target[:, t, seen], reduction="none")
        torch.testing.assert_close(got[:, t], want.sum(-1))
    assert float(indexer_kl(target.clamp_min(1e-30).log(), target).abs().max()) < 1e-5  # scores = log target: 0
    with pytest.raises(ValueError, match=r"target must be 3-D \(B, T, S\); got shape \(2, 5\)"):
        indexer_kl(scores, target[..., 0])


def test_the_indexer_fit_reproduces_the_logged_first_steps() -> None:
    """`make train-indexer` reproducibility without running it whole: its first steps give the logged KLs."""
    from lessons_src.lab.long_context import read_indexer_log

    log = read_indexer_log()
    steps = 3
    got = train_indexer.train(None, steps=log["steps"], seed=log["seed"], stop_after=steps)["train_kl"]
    # Equal on the machine that fitted it; another CPU's kernels may sum in another order (see test_text_model).
    torch.testing.assert_close(torch.tensor(got), torch.tensor(log["train_kl"][:steps]), atol=5e-4, rtol=0)
    assert len(log["train_kl"]) == log["steps"] and log["train_cpu_seconds"] < 600  # the brief: under 10 CPU min


def test_the_committed_results_recompute_from_the_committed_indexer() -> None:
    """The log was written for this text model and this indexer file; its k = 8 row recomputes from them, and its
    table is complete: every ranking at every k, the dense loss at k = T."""
    import hashlib
    from dataclasses import asdict

    from lessons_src.lab import artifact
    from lessons_src.lab.long_context import load_text_indexer, read_indexer_log, text_model_top_k
    from lessons_src.lab.text_model import TEXT_CHECKPOINT, corpus_bytes, load_text_model

    t = train_indexer
    log, indexer, model = read_indexer_log(), load_text_indexer(), load_text_model()
    assert log["text_model"]["sha256"] == hashlib.sha256(artifact(TEXT_CHECKPOINT).read_bytes()).hexdigest()
    assert log["config"] == asdict(indexer.cfg) == asdict(t.CONFIG)
    assert log["parameters"] == sum(p.numel() for p in indexer.parameters())
    r = log["results"]
    assert r["top_k"] == list(t.TOP_KS) and model.cfg.max_len in r["top_k"]
    for name in t.RANKINGS:
        assert [row["top_k"] for row in r[name]] == r["top_k"]
        assert r[name][-1]["loss"] == pytest.approx(r["dense_loss"], abs=1e-4) and r[name][-1]["weight_kept"] == 1
    windows = t.train_text.eval_windows(t.train_text.split(corpus_bytes())[1])
    assert len(windows) == log["eval_windows"]
    k = 8
    for name, ranker in (("true", None), ("indexer", indexer)):
        got = text_model_top_k(model, windows, k, indexer=ranker)
        row = r[name][r["top_k"].index(k)]
        assert (got.loss, got.weight_kept, got.recall) == pytest.approx(
            (row["loss"], row["weight_kept"], row["recall"]), abs=2e-4), name


def test_the_fitted_indexer_keeps_far_more_weight_than_its_untrained_self() -> None:
    """Fitting works: from the same seeded start, the fitted indexer keeps most of the weight the true ranking keeps
    at k = 8, the untrained one little of it (on a few validation windows)."""
    from lessons_src.lab.long_context import load_text_indexer, text_model_top_k
    from lessons_src.lab.text_model import corpus_bytes, load_text_model, spaced_windows, split_corpus

    t = train_indexer
    model = load_text_model()
    windows = spaced_windows(split_corpus(corpus_bytes(), 0.1)[1], 8, model.cfg.max_len + 1)
    best, fitted, untrained = (text_model_top_k(model, windows, 8, indexer=ix)
                               for ix in (None, load_text_indexer(), t.initial_indexer(t.SEED).eval()))
    assert fitted.weight_kept > 0.9 * best.weight_kept and untrained.weight_kept < 0.5 * best.weight_kept
    assert fitted.loss < untrained.loss - 1.0 and fitted.recall > 2 * untrained.recall


def test_indexer_weights_and_inputs_of_the_wrong_shape_are_refused(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    from lessons_src.lab.long_context import IndexerConfig, LightningIndexer, TextIndexer, text_model_top_k
    from lessons_src.lab.text_model import TextConfig, TextGPT

    cfg = IndexerConfig(d_model=16, num_layers=1, indexer_heads=2, indexer_head_dim=4, rope_dim=2)
    state = TextIndexer(cfg).state_dict()
    bad = {**state, "layers.0.wq.weight": torch.zeros(6, 16)}
    with pytest.raises(ValueError, match=r"d_model=16, num_layers=1, indexer_heads=2, indexer_head_dim=4: "
                                         r"layers\.0\.wq\.weight has shape \(6, 16\), needs \(8, 16\)"):
        TextIndexer(cfg).check_state(bad)
    save_file({k: v.contiguous() for k, v in bad.items()}, str(tmp_path / "bad.safetensors"),
              metadata={"config": json.dumps({"d_model": 16, "num_layers": 1, "indexer_heads": 2,
                                              "indexer_head_dim": 4, "rope_dim": 2})})
    with pytest.raises(ValueError, match=r"layers\.0\.wq\.weight has shape \(6, 16\), needs \(8, 16\)"):
        TextIndexer.load(tmp_path / "bad.safetensors")
    with pytest.raises(ValueError, match=r"layers\.0\.k_norm\.bias is missing; extra is not a tensor"):
        TextIndexer(cfg).check_state({**{k: v for k, v in state.items() if k != "layers.0.k_norm.bias"},
                                      "extra": torch.zeros(1)})
    with pytest.raises(ValueError, match=r"x must be \(B, T, D\) with D = d_model = 16; got \(1, 3, 8\)"):
        LightningIndexer(cfg)(torch.zeros(1, 3, 8))
    with pytest.raises(ValueError, match=r"rope_dim=3 must be even and from 0 to indexer_head_dim=4"):
        IndexerConfig(indexer_head_dim=4, rope_dim=3)
    with pytest.raises(ValueError, match=r"indexer_heads must be at least 1; got indexer_heads=0"):
        IndexerConfig(indexer_heads=0)
    model = TextGPT(TextConfig(d_model=16, num_heads=2, num_layers=2, max_len=8, d_ff=32))
    with pytest.raises(ValueError, match="indexer has d_model=16, num_layers=1; the model d_model=16, num_layers=2"):
        text_model_top_k(model, torch.zeros(1, 5, dtype=torch.long), 2, indexer=TextIndexer(cfg))


def test_docstring_examples_run() -> None:
    import doctest

    from lessons_src.lab import long_context

    torch.manual_seed(0)
    result = doctest.testmod(long_context, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 6 and result.failed == 0


def test_the_indexer_fit_table_prints_the_logged_results() -> None:
    from lessons_src.lab.long_context import indexer_fit_table, read_indexer_log

    log = read_indexer_log()
    rows = indexer_fit_table(log, [32, 1]).splitlines()[1:]  # in the log's order
    true, fitted = log["results"]["true"], log["results"]["indexer"]
    for row, i in zip(rows, [0, next(n for n, t in enumerate(true) if t["top_k"] == 32)], strict=True):
        assert row.split() == [str(true[i]["top_k"]), f"{true[i]['loss']:.3f}", f"{fitted[i]['loss']:.3f}",
                               f"{fitted[i]['recall']:.2f}"]
    with pytest.raises(ValueError, match=r"no result for top_k \[3\]"):
        indexer_fit_table(log, [1, 3])

