"""What :func:`lessons_src.lab.launch.launch` runs in each process, for the tests, the lesson and ``make parallel``.

Each takes the rank's :class:`lessons_src.lab.launch.CountingCollectives` first and returns plain data
(tensors, numbers, records), so the caller, in the parent process, compares them with a single-process
reference it computed itself. Many checks share one launch, because starting processes costs seconds.

* :func:`tensor_parallel_run`: :class:`lessons_src.parallel.TensorParallelAttention` loaded from a
  full layer's weights; output, input gradient and the shards' gradients put back in the full layout;
* :func:`ulysses_run`: :func:`lessons_src.parallel.ulysses_attention` on this rank's positions;
* :func:`ring_run`: :func:`lessons_src.ring.ring_attention`, with each step's running max and sum;
* :func:`mla_tensor_parallel`: what tensor parallelism shards and replicates in an MLA layer, counted;
  :func:`shard_mla` and :func:`mla_run`: the split run (forward, naive and absorbed, with a latent cache);
* :func:`combined_run`: several of each in one launch (the tests and the lesson use it);
* :func:`uneven_shards_run`: ring and Ulysses attention given shards of different lengths on different ranks;
* :func:`fails_beside_a_busy_rank_0`: a run that fails on rank 1 while rank 0 is still at work.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from ..layer import MultiHeadAttention
from ..mla import MultiHeadLatentAttention
from ..parallel import TensorParallelAttention, ulysses_attention
from ..ring import ring_attention, shard_sequence

if TYPE_CHECKING:
    from .configs import ModelConfig
    from .launch import CountingCollectives

__all__ = [
    "MLA_REPLICATED",
    "build_layer",
    "combined_run",
    "fails_beside_a_busy_rank_0",
    "mla_run",
    "mla_tensor_parallel",
    "ranks_and_sizes",
    "ring_run",
    "shard_mla",
    "tensor_parallel_run",
    "ulysses_run",
    "uneven_shards_run",
]


def ranks_and_sizes(comm: CountingCollectives) -> tuple[int, int]:
    """``(rank, world_size)``: the smallest possible run."""
    return comm.rank, comm.world_size


def build_layer(config: dict[str, Any], state: dict[str, torch.Tensor]) -> MultiHeadAttention:
    """A :class:`MultiHeadAttention` of ``config`` (``d_model``, ``num_heads``, ``num_kv_heads``, ``bias``), loaded."""
    mha = MultiHeadAttention(
        config["d_model"], config["num_heads"], num_kv_heads=config["num_kv_heads"], bias=config.get("bias", False)
    )
    mha.load_state_dict(state)
    return mha.to(next(iter(state.values())).dtype)


def _summed(t: torch.Tensor) -> torch.Tensor:
    """Sum over ranks without going through the counting wrapper (bookkeeping, not the algorithm's traffic)."""
    t = t.clone()
    dist.all_reduce(t)
    return t


def tensor_parallel_run(comm: CountingCollectives, cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """For each case, this rank's tensor-parallel forward and backward of the full layer given.

    A case holds ``config`` and ``state`` (the full layer), ``x`` ``(B, T, D)``, ``grad_out`` (the
    gradient fed back), ``is_causal`` and an optional ``attn_mask``. Returns per case: ``output``,
    ``x_grad``, ``grads`` (each full parameter's gradient assembled from the ranks' shards: summed where
    KV heads are replicated), ``forward`` and ``backward`` (the comm records of each pass),
    ``kv_bytes_per_token`` (fp32 and bf16) and the shard sizes.
    """
    results = []
    for case in cases:
        full = build_layer(case["config"], case["state"])
        tp = TensorParallelAttention.from_module(full, comm)
        x = case["x"].clone().requires_grad_(True)
        comm.reset()
        out = tp(x, is_causal=case.get("is_causal", False), attn_mask=case.get("attn_mask"))
        forward = list(comm.records)
        comm.reset()
        out.backward(case["grad_out"])
        backward = list(comm.records)
        assert x.grad is not None and tp.qkv_proj.weight.grad is not None and tp.out_proj.weight.grad is not None
        qkv = torch.zeros_like(full.qkv_proj.weight).index_add_(0, tp.qkv_rows, tp.qkv_proj.weight.grad)
        wo = torch.zeros_like(full.out_proj.weight).index_add_(1, tp.out_cols, tp.out_proj.weight.grad)
        grads = {"qkv_proj.weight": _summed(qkv), "out_proj.weight": _summed(wo)}
        if tp.qkv_proj.bias is not None and tp.qkv_proj.bias.grad is not None and tp.out_bias is not None:
            assert full.qkv_proj.bias is not None
            b = torch.zeros_like(full.qkv_proj.bias).index_add_(0, tp.qkv_rows, tp.qkv_proj.bias.grad)
            grads["qkv_proj.bias"] = _summed(b)
            assert tp.out_bias.grad is not None
            grads["out_proj.bias"] = tp.out_bias.grad  # replicated: every rank has the whole gradient
        results.append({
            "output": out.detach(), "x_grad": x.grad, "grads": grads, "forward": forward, "backward": backward,
            "kv_bytes_per_token": {"float32": tp.kv_cache_bytes_per_token(torch.float32),
                                   "bfloat16": tp.kv_cache_bytes_per_token(torch.bfloat16)},
            "local_heads": tp.local_heads, "local_kv_heads": tp.local_kv_heads,
            "kv_heads": list(tp.plan.kv_heads(comm.rank)), "query_heads": list(tp.plan.query_heads(comm.rank)),
            "parameters": sum(p.numel() for p in tp.parameters()),
        })
    return results


def ulysses_run(comm: CountingCollectives, cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """For each case (``config``, ``state``, full ``x`` and ``grad_out``, ``is_causal``): Ulysses on my positions.

    Returns per case this rank's ``output`` and ``x_grad`` (its positions), the parameters' gradients
    summed over ranks (each rank's are partial: its positions only), and the comm records.
    """
    results = []
    P, rank = comm.world_size, comm.rank
    for case in cases:
        mha = build_layer(case["config"], case["state"])
        x = shard_sequence(case["x"], P, rank, dim=1).requires_grad_(True)
        comm.reset()
        out = ulysses_attention(mha, x, comm, is_causal=case.get("is_causal", False))
        forward = list(comm.records)
        comm.reset()
        torch.autograd.backward(out, shard_sequence(case["grad_out"], P, rank, dim=1))
        backward = list(comm.records)
        grads = {name: _summed(p.grad) for name, p in mha.named_parameters() if p.grad is not None}
        results.append({"output": out.detach(), "x_grad": x.grad, "grads": grads, "forward": forward,
                        "backward": backward})
    return results


def ring_run(comm: CountingCollectives, cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """For each case (full ``q``, ``k``, ``v``, ``is_causal``, ``order``), ring attention on this rank's positions.

    Returns per case this rank's ``output`` and ``lse``, its ``work`` (query-key scores computed), the
    comm records and, with ``keep_steps`` in the case, each step's source rank, work, running max and sum.
    With ``grad_out`` and ``grad_lse`` in the case (full-sequence gradients of the output and the
    log-sum-exp), also the backward pass: this rank's ``grads`` of q, k, v and its ``backward`` records.
    """
    results = []
    P, rank = comm.world_size, comm.rank
    for case in cases:
        order = case.get("order", "contiguous")
        q, k, v = (shard_sequence(case[n], P, rank, dim=2, order=order) for n in ("q", "k", "v"))
        comm.reset()
        with torch.no_grad():
            r = ring_attention(q, k, v, comm, is_causal=case.get("is_causal", False), order=order,
                               keep_steps=case.get("keep_steps", False))
        steps = [{"step": s.step, "source": s.source, "work": s.work, "running_max": s.running_max,
                  "running_sum": s.running_sum} for s in r.steps]
        result = {"output": r.output, "lse": r.lse, "work": r.work, "records": list(comm.records), "steps": steps}
        if "grad_out" in case:
            q, k, v = (t.clone().requires_grad_(True) for t in (q, k, v))
            r = ring_attention(q, k, v, comm, is_causal=case.get("is_causal", False), order=order)
            comm.reset()
            g = shard_sequence(case["grad_out"], P, rank, dim=2, order=order)
            g_lse = shard_sequence(case["grad_lse"], P, rank, dim=2, order=order)
            torch.autograd.backward([r.output, r.lse], [g, g_lse])
            result["grads"] = {"q": q.grad, "k": k.grad, "v": v.grad}
            result["backward"] = list(comm.records)
        results.append(result)
    return results


def uneven_shards_run(comm: CountingCollectives, lengths: list[int]) -> dict[str, str]:
    """Ring and Ulysses attention with rank ``r`` holding ``lengths[r]`` positions (a caller's mistake).

    Returns, per method, ``"ValueError: ..."`` (or whatever else was raised) on this rank, or ``"ran"``:
    the tests check that every rank raises a ``ValueError`` rather than gloo aborting the process.
    """
    torch.manual_seed(0)
    T = lengths[comm.rank]
    mha = MultiHeadAttention(8, 2)
    q, k, v = torch.randn(3, 1, 2, T, 4).unbind(0)  # (B, H, T, E) each
    x = torch.randn(1, T, 8)  # (B, T, D)
    outcome = {}
    for name in ("ring", "ulysses"):
        try:
            with torch.no_grad():
                _ = ring_attention(q, k, v, comm) if name == "ring" else ulysses_attention(mha, x, comm)
            outcome[name] = "ran"
        except Exception as err:  # reported to the parent, which checks the type and the message
            outcome[name] = f"{type(err).__name__}: {err}"
    return outcome


def fails_beside_a_busy_rank_0(comm: CountingCollectives, seconds: float) -> None:
    """Rank 0 works for ``seconds``; every other rank raises at once (launch must not wait for rank 0 to see it)."""
    if comm.rank == 0:
        time.sleep(seconds)
    else:
        raise ValueError(f"rank {comm.rank} fails on purpose")


def combined_run(comm: CountingCollectives, work: dict[str, Any]) -> dict[str, Any]:
    """Tensor-parallel, Ulysses and ring cases in one launch: ``{"tp": [...], "ulysses": [...], "ring": [...]}``."""
    return {
        "tp": tensor_parallel_run(comm, work["tp"]),
        "ulysses": ulysses_run(comm, work["ulysses"]),
        "ring": ring_run(comm, work["ring"]),
        "mla": mla_run(comm, work.get("mla", [])),
    }


MLA_REPLICATED = ("q_down_proj", "kv_down_proj")
"""The projections of :class:`lessons_src.mla.MultiHeadLatentAttention` every rank holds whole under tensor
parallelism: they produce the compressed query and the shared key/value latent (and RoPE key), which every
head reads. The others (``q_proj``, ``k_up_proj``, ``v_up_proj``, ``out_proj``) are per head and split by heads."""


def mla_tensor_parallel(cfg: ModelConfig, degree: int) -> dict[str, Any]:
    """Parameters per rank and latent-cache bytes per token for an MLA layer of ``cfg`` over ``degree`` ranks.

    The layer is built on the meta device (shapes only, no memory), and its parameters are counted by
    name: :data:`MLA_REPLICATED` whole on every rank, the rest divided by ``degree``. The latent cache is
    replicated: every rank's heads up-project the whole latent, so each rank caches ``C + R`` numbers per
    token (bfloat16 here) whatever the degree.

    Raises:
        ValueError: if ``cfg`` has no MLA sizes, or ``degree`` does not divide its heads.
    """
    if not cfg.mla:
        raise ValueError(f"{cfg.name} has no multi-head latent attention sizes (cfg.mla is empty)")
    if isinstance(degree, bool) or not isinstance(degree, int) or degree < 1 or cfg.num_heads % degree:
        divisors = [p for p in range(1, cfg.num_heads + 1) if cfg.num_heads % p == 0]
        raise ValueError(f"degree must divide num_heads={cfg.num_heads}; got {degree!r}; degrees that do: {divisors}")
    m = cfg.mla
    with torch.device("meta"):
        layer = MultiHeadLatentAttention(
            cfg.d_model, cfg.num_heads, kv_latent_dim=m["kv_latent_dim"], rope_dim=m["rope_dim"],
            head_dim=cfg.head_dim, v_head_dim=m.get("v_head_dim"), q_latent_dim=m.get("q_latent_dim"),
        )
    replicated = sharded = 0
    for name, p in layer.named_parameters():
        if name.split(".")[0] in MLA_REPLICATED:
            replicated += p.numel()
        else:
            sharded += p.numel()
    return {
        "replicated": [n for n in MLA_REPLICATED if getattr(layer, n, None) is not None],
        "replicated_parameters": replicated,
        "sharded_parameters": sharded,
        "per_rank_parameters": replicated + sharded // degree,
        "cache_bytes_per_token": (m["kv_latent_dim"] + m["rope_dim"]) * 2,
    }


def shard_mla(full: MultiHeadLatentAttention, rank: int, degree: int) -> MultiHeadLatentAttention:
    """Rank ``rank``'s share of ``full`` under tensor parallelism: an MLA layer with ``H / degree`` heads.

    The query down-projection and the key/value down-projection (latent and RoPE key) are copied whole;
    the per-head query projection, ``W_UK``, ``W_UV`` and ``W_O`` keep only this rank's heads. Its output
    is this rank's share of ``W_O``'s sum over heads: adding the ranks' outputs (one all-reduce) gives
    ``full``'s. Its latent cache is the whole latent, as on every rank.

    Raises:
        ValueError: if ``degree`` does not divide ``full.num_heads`` or ``rank`` is out of range.
    """
    H = full.num_heads
    if isinstance(degree, bool) or not isinstance(degree, int) or degree < 1 or H % degree:
        divisors = [p for p in range(1, H + 1) if H % p == 0]
        raise ValueError(f"degree must divide num_heads={H}; got {degree!r}; degrees that do: {divisors}")
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < degree:
        raise ValueError(f"rank must be in 0..{degree - 1}; got {rank!r}")
    Hl, E, Ev, R = H // degree, full.head_dim, full.v_head_dim, full.rope_dim
    w = full.kv_down_proj.weight
    local = MultiHeadLatentAttention(
        full.d_model, Hl, kv_latent_dim=full.kv_latent_dim, rope_dim=R, head_dim=E, v_head_dim=Ev,
        q_latent_dim=full.q_latent_dim, rope_base=full.rope_base,
    ).to(dtype=w.dtype, device=w.device)
    heads = slice(rank * Hl, (rank + 1) * Hl)

    def rows(weight: torch.Tensor, per_head: int) -> torch.Tensor:
        return weight.view(H, per_head, -1)[heads].reshape(Hl * per_head, -1)  # this rank's heads' rows

    with torch.no_grad():
        if full.q_down_proj is not None and local.q_down_proj is not None:
            local.q_down_proj.weight.copy_(full.q_down_proj.weight)  # replicated
        local.kv_down_proj.weight.copy_(full.kv_down_proj.weight)  # replicated
        local.q_proj.weight.copy_(rows(full.q_proj.weight, E + R))
        local.k_up_proj.weight.copy_(rows(full.k_up_proj.weight, E))
        local.v_up_proj.weight.copy_(rows(full.v_up_proj.weight, Ev))
        local.out_proj.weight.copy_(full.out_proj.weight.view(-1, H, Ev)[:, heads].reshape(-1, Hl * Ev))
    return local


def mla_run(comm: CountingCollectives, cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """For each case, tensor-parallel MLA on this rank: a prefill then one decoded token, through a latent cache.

    A case holds ``config`` (the keyword arguments of :class:`lessons_src.mla.MultiHeadLatentAttention`),
    ``state`` (the full layer's weights), ``prompt`` ``(B, T, D)``, ``token`` ``(B, 1, D)`` and ``mode``.
    Returns per case the summed ``prefill`` and ``decode`` outputs, this rank's ``cache_bytes`` and
    parameter count, and the comm records.
    """
    from ..kv_cache import LatentCache

    results = []
    for case in cases:
        cfg = dict(case["config"])
        full = MultiHeadLatentAttention(cfg.pop("d_model"), cfg.pop("num_heads"), **cfg)
        full.load_state_dict(case["state"])
        local = shard_mla(full, comm.rank, comm.world_size).eval()
        B, T, _ = case["prompt"].shape
        cache = LatentCache(batch_size=B, kv_latent_dim=full.kv_latent_dim, rope_dim=full.rope_dim, max_len=T + 1)
        comm.reset()
        with torch.no_grad():
            prefill = comm.all_reduce(local(case["prompt"], cache=cache, mode=case["mode"]))  # sum over heads
            decode = comm.all_reduce(local(case["token"], cache=cache, mode=case["mode"]))
        results.append({"prefill": prefill, "decode": decode, "cache_bytes": cache.nbytes,
                        "parameters": sum(p.numel() for p in local.parameters()), "records": list(comm.records)})
    return results


def fresh_state(comm: CountingCollectives) -> dict[str, Any]:
    """What a rank starts with: its first random draw (a new process seeds torch anew from the system) and the
    process it was forked from."""
    return {"draw": torch.rand(3).tolist(), "parent": os.getppid(), "rank": comm.rank}
