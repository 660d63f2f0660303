"""lessons_src.lab.continuous_batching: requests that arrive, prefill in chunks, decode and leave, on one page pool.

The reference is each prompt decoded alone by full passes (``batching.generate_alone``): every request's tokens are
its, and its logits to float32's tolerance, however the steps mixed it with others; and ``transformers``' own
continuous batching (``generate_batch``) on a tiny random Qwen3, whose weights the course's copy of that decoder
shares: the same greedy tokens, and the same log-probabilities. A prompt that begins with whole
pages another request holds starts on those very pages (the same block ids, computed once); every page is back in
the pool when the last request leaves, and none is held that no request names during the run.
"""

from __future__ import annotations

import pytest
import torch
from qwen3_like import Qwen3Like, tiny_qwen3

from lessons_src.lab.batching import generate_alone
from lessons_src.lab.continuous_batching import Request, serve, steps_figure
from lessons_src.lab.text_model import TextConfig, TextGPT, encode, load_text_model

SYSTEM = "A cache keeps the keys and values of every token so far. "  # 58 bytes: 3 whole pages of 16, and some


@pytest.fixture(scope="module")
def model() -> TextGPT:
    return load_text_model()


def _requests() -> list[Request]:
    return [Request(encode(SYSTEM + "Keys"), 6), Request(encode("Heads split"), 12),
            Request(encode("The softmax of the scores " * 2), 5, arrival=1),
            Request(encode(SYSTEM + "Values"), 7, arrival=3), Request(encode("Q"), 9, arrival=4)]


@pytest.fixture(scope="module")
def served(model: TextGPT):  # type: ignore[no-untyped-def]
    return serve(model, _requests(), num_blocks=24, block_size=16, max_batch_tokens=24)


def test_every_request_equals_its_prompt_decoded_alone(model: TextGPT, served) -> None:  # type: ignore[no-untyped-def]
    for r, tokens, logits in zip(_requests(), served.tokens, served.logits, strict=True):
        alone = generate_alone(model, r.prompt, r.max_new)
        assert torch.equal(tokens, alone.tokens[0])
        torch.testing.assert_close(logits, alone.logits[0], atol=5e-5, rtol=1e-5)


def test_requests_join_prefill_in_chunks_beside_decoding_and_leave(served) -> None:  # type: ignore[no-untyped-def]
    kinds = [{kind for _, kind, _ in step.rows} for step in served.steps]
    assert {"prefill", "decode"} in kinds  # a step with both
    assert all(sum(n for _, _, n in step.rows) <= 24 for step in served.steps)
    chunks = [n for step in served.steps for i, kind, n in step.rows if i == 2 and kind == "prefill"]
    assert len(chunks) >= 2 and sum(chunks) == 52  # request 2's prompt, over several steps
    assert served.computed == sum(n for step in served.steps for _, _, n in step.rows)


def test_a_shared_prompt_is_read_from_the_same_pages_not_copied(served) -> None:  # type: ignore[no-untyped-def]
    first = next(step.pages for step in served.steps if 3 in step.pages)
    assert first[3][:3] == first[0][:3]  # the system prompt's 3 whole pages: the same blocks
    assert served.shared == 48
    prefill = sum(n for step in served.steps for i, kind, n in step.rows if i == 3 and kind == "prefill")
    assert prefill == len(encode(SYSTEM + "Values")) - 48  # only the rest was computed


def test_every_page_is_counted_through_the_run_and_back_in_the_pool_at_the_end(served) -> None:  # type: ignore[no-untyped-def]
    for step in served.steps:
        named = {b for table in step.pages.values() for b in table}
        assert step.blocks_in_use == len(named)  # none held that no running request names
    assert served.steps[-1].blocks_in_use == 0 and served.steps[-1].pages == {}


def test_sharing_lowers_the_peak_bytes(model: TextGPT) -> None:
    """Three prompts after one system prompt, each arriving once the one before is cached, against the same
    prompts with the system prompt moved after the first few bytes (nothing to share)."""
    same = [Request(encode(SYSTEM + tail), 4, arrival=t) for t, tail in enumerate(("one", "two", "six"))]
    other = [Request(encode(SYSTEM + "one"), 4)] + [Request(encode(tail + SYSTEM), 4, arrival=t + 1)
                                                    for t, tail in enumerate(("two", "six"))]
    kept = {}
    for name, reqs in (("shared", same), ("apart", other)):
        kept[name] = serve(model, reqs, num_blocks=24, max_batch_tokens=64)
    assert kept["shared"].shared == 96 and kept["apart"].shared == 0
    assert kept["shared"].peak_bytes < kept["apart"].peak_bytes


def test_the_steps_figure_draws_each_step() -> None:
    model = TextGPT(TextConfig(d_model=16, num_heads=2, max_len=16, d_ff=32)).eval()
    done = serve(model, [Request(encode("hello"), 3), Request(encode("hi"), 2, arrival=1)], block_size=4)
    assert [len(t) for t in done.tokens] == [3, 2] and [len(s.rows) for s in done.steps] == [1, 2, 2]
    fig = steps_figure(done.steps, size=(4, 2), font=9)
    assert len(fig.axes) == 2 and len(fig.axes[0].patches) == 5


def test_the_same_tokens_as_transformers_generate_batch() -> None:
    """Six prompts (87 tokens: more than a step's 64, so prefill goes in chunks beside decoding; two share 32 tokens,
    the second arriving later in the course's loop so it starts on the first one's pages) through ``generate_batch``
    with a small configuration of pages, and through :func:`serve` with the same: the same greedy tokens, and each
    token's log-probability to float32's tolerance."""
    pytest.importorskip("transformers")
    from transformers import GenerationConfig
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    ref = tiny_qwen3(max_position_embeddings=64)
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(1, 64, (n,), generator=g) for n in (3, 20, 7, 40, 5)]
    prompts.append(torch.cat([prompts[3][:32], torch.randint(1, 64, (12,), generator=g)]))
    with torch.no_grad():
        theirs = ref.generate_batch([p.tolist() for p in prompts], warmup=False,
                                    generation_config=GenerationConfig(max_new_tokens=8, do_sample=False,
                                                                       eos_token_id=-1, pad_token_id=0),
                                    continuous_batching_config=ContinuousBatchingConfig(
                                        page_size=16, num_blocks=16, max_batch_tokens=64, return_logprobs=True))
    ours = serve(Qwen3Like(ref).eval(), [Request(p, 8, arrival=2 * (i == 5)) for i, p in enumerate(prompts)],
                 num_blocks=16, block_size=16, max_batch_tokens=64)
    assert [t.tolist() for t in ours.tokens] == [out.generated_tokens for out in theirs.values()]
    assert ours.shared == 32 and any({kind for _, kind, _ in step.rows} == {"prefill", "decode"} for step in ours.steps)
    for logits, tokens, out in zip(ours.logits, ours.tokens, theirs.values(), strict=True):
        chosen = torch.log_softmax(logits, dim=-1).gather(-1, tokens[:, None])[:, 0]
        torch.testing.assert_close(chosen, torch.tensor(out.logprobs), atol=1e-5, rtol=1e-5)


def _tiny() -> TextGPT:
    return TextGPT(TextConfig(d_model=16, num_heads=2, max_len=16, d_ff=32)).eval()


@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda: serve(_tiny(), []), TypeError, r"requests must be a non-empty list of Request; got list"),
    (lambda: serve(_tiny(), ["ab"]), TypeError, r"requests\[0\] must be a Request; got str"),  # type: ignore[list-item]
    (lambda: Request(torch.zeros(2, 2, dtype=torch.long), 1), ValueError, r"prompt must be 1-D \(L,\) of token ids"),
    (lambda: Request(torch.zeros(0, dtype=torch.long), 1), ValueError, r"prompt is empty"),
    (lambda: Request(encode("a"), 0), ValueError, r"max_new must be at least 1 \(tokens to write\)"),
    (lambda: Request(encode("a"), 1, arrival=-1), ValueError, r"arrival must be at least 0"),
    (lambda: serve("model", [Request(encode("a"), 1)]), TypeError, r"model must be a decoder with make_caches\(\)"),
    (lambda: steps_figure(["x"], size=(4, 2), font=9), TypeError, r"steps must be a list of Step"),
    (lambda: steps_figure([], size=4, font=9), TypeError, r"size must be \(width, height\) in inches; got 4"),
    (lambda: steps_figure([], size=(4, 2), font=0), ValueError, r"font must be above 0"),
    (lambda: serve(_tiny(), [Request(encode("a" * 10), 8)]), ValueError,
     r"requests\[0\] has a prompt of 10 tokens and max_new=8: the prompt needs 1 to 9 tokens to stay in the context "
     r"of 16"),
    (lambda: serve(_tiny(), [Request(encode("a" * 9), 8)], num_blocks=3, block_size=4), ValueError,
     r"a request needs up to 4 pages of 4 but the pool has num_blocks=3"),
    (lambda: serve(_tiny(), [Request(encode("a"), 1)], max_batch_tokens=0), ValueError,
     r"max_batch_tokens must be at least 1 \(tokens per step\)"),
    (lambda: serve(_tiny(), [Request(encode("a"), 1)], block_size=1.5), TypeError, r"block_size must be an int"),
])
def test_bad_input_gets_a_clear_error(call, error, match) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(error, match=match):
        call()
