"""Decode the text model's validation windows with each quantized KV cache (``make measure-quantized-cache``).

The committed text model decodes the fixed validation windows of ``train_text.py`` (64 windows of the course's
prose) byte by byte through its cached decode, once with float caches and once with each cache of
:data:`lessons_src.lab.quantized_kv.FORMATS`, and, for the 4-bit formats, with the keys alone or the values alone
quantized (:func:`~lessons_src.lab.quantized_kv.compare_formats`); then each layer's largest channel of keys and of
values against the median channel (:func:`~lessons_src.lab.quantized_kv.channel_spread`); the two coarsest formats
again with the keys rotated by a Hadamard matrix first (``+hadamard``). No randomness: the
windows are fixed and decoding is greedy. One CPU thread. Writes ``lessons_src/lab/artifacts/quantized_cache.json``.

    python tools/train/measure_quantized_cache.py                  # the committed artifact
    python tools/train/measure_quantized_cache.py --out /tmp/x     # somewhere else
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
import train_text  # noqa: E402

from lessons_src.lab.quantized_kv import QUANTIZED_LOG, channel_spread, compare_formats  # noqa: E402
from lessons_src.lab.text_model import corpus_bytes, load_text_model  # noqa: E402

PROMPT = 64  # bytes before the greedy continuation (to the context's end, 128)
FORMATS = ("q8_0", "fp8", "q4_0", "kivi-4", "kivi-2", "q4_0+hadamard", "kivi-2+hadamard")
PARTS = {"q4_0": ("both", "keys", "values"), "kivi-2": ("both", "keys", "values")}


def measure() -> dict[str, object]:
    """The report: settings, one row per format and part, and the channel spread per layer."""
    torch.set_num_threads(1)
    model = load_text_model().eval()
    windows = train_text.eval_windows(train_text.split(corpus_bytes())[1])  # (64, 129)
    cpu = time.process_time()
    rows = []
    for name in FORMATS:
        rows += compare_formats(model, windows, [name], prompt=PROMPT, parts=PARTS.get(name, ("both",)))
    return {
        "windows": int(windows.shape[0]), "window_bytes": int(windows.shape[1]), "prompt": PROMPT,
        "layers": model.cfg.num_layers, "num_heads": model.cfg.num_heads,
        "head_dim": model.cfg.d_model // model.cfg.num_heads, "float_bytes_per_token": 2 * model.cfg.d_model * 4,
        "rows": rows, "channel_spread": channel_spread(model, windows[:, :-1]),
        "cpu_seconds": round(time.process_time() - cpu, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "lessons_src" / "lab" / "artifacts")
    out = parser.parse_args().out
    report = measure()
    out.mkdir(parents=True, exist_ok=True)
    (out / QUANTIZED_LOG).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    for r in report["rows"]:  # type: ignore[attr-defined]
        print(f"{r['format']:>7} {r['part']:>6}  {r['bytes_per_token']:6.1f} B  loss {r['loss_change']:+.4f}  "
              f"out err {max(r['output_error']):.4f}  greedy {r['greedy_agreement']:.3f}")
    print(report["channel_spread"], report["cpu_seconds"], "CPU-s")


if __name__ == "__main__":
    main()
