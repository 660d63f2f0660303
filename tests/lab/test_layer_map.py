"""The layer map's order is the code's: the course's layer and each model's module as the pinned ``transformers``
ships it take the steps in the order of ``LAYER_STEPS``, and every model the figure names beside a step has that
step in its code (issue 78).

Each source below is read as text (``inspect.getsource``) and each step is found in it by a line that does it;
the test fails when a step the figure places is missing from a source, found more than once, or found out of the
figure's order. The numbers behind each piece (ours == theirs with copied weights, and a misplaced piece
failing) are ``tests/core/test_mechanisms.py``'s; this file holds the figure to the same code.
"""

from __future__ import annotations

import inspect

import pytest

from lessons_src.lab.layer_map import LAYER_STEPS, LayerStep, layer_map, sink_column_map

ORDER = [step.name for step in LAYER_STEPS]


def _sources() -> dict[str, tuple[object, dict[str, str]]]:
    """Each source: the function or method read, and for each step it does, the text of the line that does it."""
    pytest.importorskip("transformers")
    from transformers.models.gemma2 import modeling_gemma2
    from transformers.models.gemma3.modeling_gemma3 import Gemma3Attention
    from transformers.models.gpt_oss import modeling_gpt_oss
    from transformers.models.llama4.modeling_llama4 import Llama4TextAttention
    from transformers.models.olmo2.modeling_olmo2 import Olmo2Attention
    from transformers.models.qwen3.modeling_qwen3 import Qwen3Attention
    from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextAttention

    from lessons_src.functional import eager_attention
    from lessons_src.layer import MultiHeadAttention

    rope, out = "apply_rotary_pos_emb(query_states, key_states", "self.o_proj(attn_output)"
    return {
        "course layer": (MultiHeadAttention._attend, {
            "project": "self.project_qkv(x, context)", "qk_norm": "self.qk_norm(q, k)", "rope": "self.rope(q, k",
            "scores": "ATTENTION_FUNCTIONS[impl](", "gate": "self.gate(x, result.output)", "out": "self.out_proj(y)"}),
        "course eager": (eager_attention, {
            "scores": "transpose(-2, -1)) * scale", "softcap": "soft_cap(scores, softcap)", "mask": "masked_fill(~full",
            "softmax": "torch.cat([scores, sinks", "values": "weights @ v"}),
        "Qwen3": (Qwen3Attention.forward, {  # its norm wraps the projection: no line of its own for "project"
            "qk_norm": "self.q_norm(", "rope": rope, "out": out}),
        "Gemma 3": (Gemma3Attention.forward, {
            "project": "self.q_proj(hidden_states)", "qk_norm": "self.q_norm(", "rope": rope,
            "mask": "sliding_window=self.sliding_window", "out": out}),
        "OLMo 2": (Olmo2Attention.forward, {
            "qk_norm": "self.q_norm(", "rope": rope, "out": out}),
        "Qwen3-Next": (Qwen3NextAttention.forward, {
            "project": "self.q_proj(hidden_states)", "qk_norm": "self.q_norm(", "rope": rope,
            "gate": "torch.sigmoid(gate)", "out": out}),
        "Llama 4 Scout": (Llama4TextAttention.forward, {
            "project": "self.q_proj(hidden_states)", "rope": "apply_rotary_emb(", "qk_norm_after": "self.qk_norm(query",
            "out": out}),
        "Gemma 2": (modeling_gemma2.eager_attention_forward, {
            "scores": "* scaling", "softcap": "torch.tanh(", "mask": "+ attention_mask", "softmax": "softmax(",
            "values": "torch.matmul(attn_weights, value_states)"}),
        "gpt-oss": (modeling_gpt_oss.eager_attention_forward, {
            "scores": "* scaling", "mask": "+ attention_mask", "softmax": "torch.cat([attn_weights, sinks]",
            "values": "torch.matmul(attn_weights, value_states)"}),
        "gpt-oss layer": (modeling_gpt_oss.GptOssAttention.forward, {
            "project": "self.q_proj(hidden_states)", "rope": rope, "mask": "sliding_window=self.sliding_window",
            "out": out}),
    }


def _positions(source: str, found: dict[str, str], name: str) -> list[tuple[int, str]]:
    where = []
    for step, text in found.items():
        assert step in ORDER, f"{name}: {step!r} is not a step of LAYER_STEPS"
        count = source.count(text)
        assert count == 1, f"{name}: {text!r} ({step}) found {count} times, not once"
        where.append((source.index(text), step))
    return sorted(where)


def test_every_source_takes_the_steps_in_the_figures_order() -> None:
    for name, (fn, found) in _sources().items():
        source = inspect.getsource(fn)  # type: ignore[arg-type]
        steps = [step for _, step in _positions(source, found, name)]
        assert steps == sorted(steps, key=ORDER.index), f"{name} takes {steps}; the figure's order is {ORDER}"


def test_every_model_the_figure_names_has_the_step_in_its_code() -> None:
    sources = _sources()
    for step in LAYER_STEPS:
        for model in step.models:
            done = {s for name, (_, found) in sources.items() if name.split(" layer")[0] == model for s in found}
            assert step.name in done, f"the figure names {model} beside {step.name!r}; its code was not read for it"


def test_a_step_moved_in_the_figure_fails_the_order() -> None:
    """The check above, run on the figure's list with the cap moved after the mask and the norm after RoPE."""
    sources = _sources()
    swapped = {"softcap": "mask", "qk_norm": "rope"}
    for first, second in swapped.items():
        order = list(ORDER)
        i, j = order.index(first), order.index(second)
        order[i], order[j] = order[j], order[i]
        wrong = []
        for name, (fn, found) in sources.items():
            steps = [step for _, step in _positions(inspect.getsource(fn), found, name)]  # type: ignore[arg-type]
            if steps != sorted(steps, key=order.index):
                wrong.append(name)
        assert wrong, f"{first} and {second} swapped: no source disagrees"


def test_the_figure_draws_every_step_and_its_models() -> None:
    pytest.importorskip("matplotlib")
    from lessons_src.lab.plotting import svg

    text = svg(layer_map(highlight=["softcap"]), title="layer")
    for step in LAYER_STEPS:
        assert text.count(step.label.split(":")[0]) >= 2, f"{step.label} not drawn in both variants"
        for model in step.models:
            assert model in text, f"{model} not drawn"
    assert text == svg(layer_map(highlight=["softcap"]), title="layer")  # reproducible


def test_note_lines_never_break_a_name() -> None:
    step = LayerStep("x", "x", ("Qwen3", "Gemma 3", "OLMo 2"), lead="windows:")
    assert step.note_lines(15).splitlines() == ["windows: Qwen3,", "Gemma 3, OLMo 2"]
    assert step.note == "windows: Qwen3, Gemma 3, OLMo 2"


@pytest.mark.parametrize(("value", "error", "match"), [
    ("softcap", TypeError, "highlight must be a list of step names"),
    (["cap"], ValueError, "highlight must name steps of LAYER_STEPS .*got 'cap'"),
])
def test_highlight_names_the_argument(value: object, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        layer_map(highlight=value)  # type: ignore[arg-type]


def test_the_sink_map_draws_every_weight_and_the_sink() -> None:
    pytest.importorskip("matplotlib")
    import torch

    from lessons_src.lab.plotting import svg

    s = torch.tensor([[0.0, float("-inf"), 1.0], [0.5, 0.0, 2.0]])  # two queries, two keys, the sink's logit
    w = torch.softmax(s, -1)  # (T, S + 1)
    text = svg(sink_column_map(w), title="sink")
    assert "sink" in text and f"{w[1, 2]:.2f}" in text and f"{w[0, 0]:.2f}" in text


@pytest.mark.parametrize(("value", "error", "match"), [
    ([[0.5, 0.5]], TypeError, "weights must be a tensor"),
    ("1d", ValueError, r"weights must be \(T, S \+ 1\)"),
    ("unnormalised", ValueError, "rows summing to 1"),
])
def test_the_sink_map_names_its_argument(value: object, error: type[Exception], match: str) -> None:
    import torch

    if isinstance(value, str):
        value = {"1d": torch.ones(3) / 3, "unnormalised": torch.ones(2, 3)}[value]
    with pytest.raises(error, match=match):
        sink_column_map(value)  # type: ignore[arg-type]
