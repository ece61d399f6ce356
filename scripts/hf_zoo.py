#!/usr/bin/env python3
"""A zoo of Hugging Face transformers architectures through irc: each model type is built from
its default configuration shrunk to a few layers of width 32-64 (random weights, seeded, no
network), exported to ONNX, imported with `irc import` and run — on the CPU by irc's reference
interpreter (`--device cpu`, the default: no GPU needed), or on the GPU with `--check` against
the interpreter (`--device gpu`) — and its first output compared with PyTorch eager's (float32).
One row per model type, whatever fails and where: a coverage check of the importer and the
kernels on architectures the committed fixtures do not have.

    python3 scripts/hf_zoo.py --irc target/release/irc [--types a,b,...] [--device cpu|gpu]
                              [--exporter torchscript|dynamo] [--opset N] [--out DIR]
                              [--attention eager|sdpa] [--dtype float32|float16|bfloat16]

Needs torch, transformers and onnx (onnxscript for `--exporter dynamo`). Writes DIR/hf_zoo.md
(default: $OUT or .) and prints each row as it finishes. A row's `export` fails where PyTorch's
exporter does; `import`, `run` and the error are irc's.
"""
import argparse
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zoo_common import irc_import, irc_run_and_compare, run_rows, within  # noqa: E402

TEXT = [
    # encoders
    "bert", "roberta", "distilbert", "albert", "electra", "deberta", "deberta-v2", "xlm-roberta",
    "mpnet", "camembert", "convbert", "mobilebert", "funnel", "squeezebert", "layoutlm", "ernie",
    "modernbert", "megatron-bert", "roformer", "rembert", "nystromformer", "data2vec-text",
    "esm", "xlm", "flaubert", "canine", "fnet", "big_bird", "longformer",
    # decoders
    "gpt2", "gpt_neo", "gptj", "gpt_neox", "gpt_bigcode", "opt", "bloom", "falcon", "llama",
    "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma", "gemma2",
    "gemma3_text", "phi", "phi3", "stablelm", "olmo", "olmo2", "cohere", "starcoder2", "granite",
    "codegen", "mpt", "persimmon", "biogpt", "xglm", "glm", "helium", "nemotron", "olmoe",
    "mamba", "rwkv",
    # encoder-decoders
    "t5", "mt5", "umt5", "bart", "mbart", "marian", "pegasus", "blenderbot", "blenderbot-small",
    "m2m_100", "longt5", "switch_transformers", "plbart", "fsmt", "prophetnet", "led",
]
VISION = [
    "vit", "deit", "beit", "swin", "swinv2", "convnext", "convnextv2", "resnet", "regnet",
    "segformer", "dinov2", "levit", "mobilevit", "mobilenet_v2", "efficientnet", "poolformer",
    "pvt_v2", "cvt", "focalnet", "bit", "yolos", "data2vec-vision", "clip_vision_model",
    "siglip_vision_model", "van", "glpn", "dpt", "mobilevitv2", "hiera", "vit_msn",
]
AUDIO = ["wav2vec2", "hubert", "wavlm", "data2vec-audio", "sew", "unispeech", "whisper",
         "speech_to_text", "audio-spectrogram-transformer"]
TYPES = TEXT + VISION + AUDIO

# Configuration fields shrunk where a model type has them (the first value that fits).
WIDTH = ["hidden_size", "n_embd", "d_model", "dim", "embed_dim", "hidden_dim_size"]
LAYERS = ["num_hidden_layers", "n_layer", "num_layers", "n_layers", "encoder_layers",
          "decoder_layers", "num_decoder_layers", "num_encoder_layers"]
HEADS = ["num_attention_heads", "n_head", "encoder_attention_heads", "decoder_attention_heads",
         "num_heads", "n_heads"]
FFN = ["intermediate_size", "n_inner", "ffn_dim", "encoder_ffn_dim", "decoder_ffn_dim", "d_ff",
       "moe_intermediate_size", "shared_expert_intermediate_size"]
SEQ, BATCH, WIDTH_V, HEADS_V = 16, 2, 64, 4


def shrink(cfg):
    """The configuration made small: width 64 over 4 heads of 16, 2 layers, vocabulary 128;
    a model of stages (a `depths` list: Swin, ConvNeXt...) keeps its widths and image size
    with one block a stage."""
    def has(k):
        return hasattr(cfg, k) and not callable(getattr(cfg, k))

    def put(k, v):
        try:
            setattr(cfg, k, v)
        except Exception:  # noqa: BLE001 - a derived property, or one the model refuses
            pass
    if isinstance(getattr(cfg, "depths", None), (list, tuple)):
        put("depths", [1] * len(cfg.depths))
        for k in ("num_hidden_layers", "use_cache", "output_hidden_states"):
            if has(k) and isinstance(getattr(cfg, k), bool):
                put(k, False)
        return cfg
    if isinstance(getattr(cfg, "block_sizes", None), (list, tuple)):  # Funnel
        put("block_sizes", [1] * len(cfg.block_sizes))
    for keys, v in [(WIDTH, WIDTH_V), (LAYERS, 2), (HEADS, HEADS_V), (FFN, 2 * WIDTH_V)]:
        for k in keys:
            if has(k) and isinstance(getattr(cfg, k), int) and not isinstance(getattr(cfg, k), bool):
                put(k, v)
    for k, v in [("num_key_value_heads", 2), ("head_dim", WIDTH_V // HEADS_V), ("d_kv", 16),
                 ("vocab_size", 128), ("max_position_embeddings", 64), ("n_positions", 64),
                 ("num_experts", 4), ("num_local_experts", 4), ("n_routed_experts", 4),
                 ("num_experts_per_tok", 2), ("embedding_size", WIDTH_V),
                 ("intermediate_size_mlp", 2 * WIDTH_V), ("rotary_dim", 8),
                 ("attention_window", 4), ("block_size", 4), ("num_random_blocks", 1),
                 ("partial_rotary_factor", 0.5), ("image_size", 32), ("patch_size", 8),
                 ("num_channels", 3), ("num_mel_bins", 16), ("max_source_positions", 32),
                 ("max_target_positions", 32), ("num_conv_pos_embeddings", 16),
                 ("max_length", 16), ("frequency_stride", 10), ("time_stride", 10)]:
        if has(k) and isinstance(getattr(cfg, k), type(v)):
            put(k, v)
    if has("attention_type") and cfg.attention_type == "block_sparse":
        put("attention_type", "original_full")
    for k in ("use_cache", "output_hidden_states", "output_attentions"):
        if has(k):
            put(k, False)
    # Special tokens inside the small vocabulary.
    for k in [k for k in dir(cfg) if k.endswith("_token_id")]:
        v = getattr(cfg, k, None)
        if isinstance(v, int) and v >= 128:
            put(k, 1)
    return cfg


def inputs_for(model, cfg):
    """The model's inputs: token ids with an attention mask whose first two positions are
    padding (and decoder ids for encoder-decoders), pixels, or a waveform / features."""
    g = torch.Generator().manual_seed(0)
    name = getattr(model, "main_input_name", "input_ids")
    if name == "pixel_values":
        size = getattr(cfg, "image_size", 32)
        size = size if isinstance(size, int) else size[0]
        return {"pixel_values": torch.randn(1, getattr(cfg, "num_channels", 3), size, size, generator=g)}
    if name == "input_values":
        return {"input_values": torch.randn(1, 4000, generator=g)}
    if name == "input_features":
        bins = getattr(cfg, "num_mel_bins", 80)
        frames = 2 * getattr(cfg, "max_source_positions", 32)
        if cfg.model_type == "audio-spectrogram-transformer":
            return {"input_values": torch.randn(1, getattr(cfg, "max_length", 16), bins, generator=g)}
        if cfg.model_type == "speech_to_text":
            return {"input_features": torch.randn(1, 32, getattr(cfg, "input_feat_per_channel", 80), generator=g),
                    "decoder_input_ids": torch.randint(3, 100, (1, 4), generator=g)}
        return {"input_features": torch.randn(1, bins, frames, generator=g),
                "decoder_input_ids": torch.randint(3, 100, (1, 4), generator=g)}
    vocab = min(getattr(cfg, "vocab_size", 128) or 128, 128)
    ids = torch.randint(3, vocab, (BATCH, SEQ), generator=g)
    out = {"input_ids": ids}
    mask = torch.ones(BATCH, SEQ, dtype=torch.int64)
    mask[:, :2] = 0
    if cfg.model_type not in ("mamba", "rwkv", "fnet", "canine"):
        out["attention_mask"] = mask
    if getattr(cfg, "is_encoder_decoder", False):
        out["decoder_input_ids"] = torch.randint(3, vocab, (BATCH, 6), generator=g)
    return out


class Positional(torch.nn.Module):
    """The model with positional inputs and its first output tensor."""

    def __init__(self, model, names):
        super().__init__()
        self.model, self.names = model, names

    def forward(self, *args):
        out = self.model(**dict(zip(self.names, args)))
        for k in ("last_hidden_state", "logits"):
            if hasattr(out, k) and getattr(out, k) is not None:
                return getattr(out, k)
        return out[0]


def first_line(e):
    s = str(e).strip()
    return (s.splitlines()[-1] if s else type(e).__name__)[:140].replace("|", "/")


def row(mt, irc, work, a):
    import transformers
    out = {"type": mt}
    torch.manual_seed(0)
    try:
        cfg = shrink(transformers.AutoConfig.for_model(mt))
        try:
            cfg._attn_implementation = a.attention
        except Exception:  # noqa: BLE001 - not every configuration has it
            pass
        dtype = getattr(torch, a.dtype)
        try:
            model = transformers.AutoModel.from_config(cfg)
        except ValueError as e:
            # A model without an SDPA path is built with its eager attention (noted).
            if a.attention != "sdpa" or "attention implementation" not in str(e):
                raise
            cfg._attn_implementation = "eager"
            model = transformers.AutoModel.from_config(cfg)
            out["attention"] = "eager"
        model = model.eval().to(dtype)
        inputs = {k: v.to(dtype) if v.is_floating_point() else v
                  for k, v in inputs_for(model, cfg).items()}
        names = list(inputs)
        wrapped = Positional(model, names).eval()
        args = tuple(inputs[n] for n in names)
        with torch.no_grad():
            ref = wrapped(*args)
    except Exception as e:  # noqa: BLE001 - recorded
        out["export"] = "build: " + first_line(e)
        return out
    onnx = os.path.join(work, f"{mt}.onnx")
    try:
        kw = dict(input_names=names, output_names=["out0"], opset_version=a.opset)
        with torch.no_grad():
            if a.exporter == "dynamo":
                torch.onnx.export(wrapped, args, onnx, dynamo=True, external_data=False, **kw)
            else:
                torch.onnx.export(wrapped, args, onnx, dynamo=False, do_constant_folding=True, **kw)
    except Exception as e:  # noqa: BLE001 - recorded
        out["export"] = "FAIL: " + first_line(e)
        return out
    out["export"] = "ok"
    for n in names:
        np.save(os.path.join(work, f"{mt}.{n}.npy"), inputs[n].numpy())
    ir = os.path.join(work, f"{mt}.ir")
    if not irc_import(irc, onnx, ir, a.timeout, out, width=200):
        return out
    extra = ["--device", "gpu", "--check"] if a.device == "gpu" else []
    inputs = [(n, os.path.join(work, f"{mt}.{n}.npy")) for n in names]
    irc_run_and_compare(irc, ir, inputs, os.path.join(work, f"{mt}.out"), ref, a.timeout, out,
                        extra, width=200)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--irc", default="target/release/irc")
    ap.add_argument("--types", default=",".join(TYPES))
    ap.add_argument("--device", choices=["cpu", "gpu"], default="cpu")
    ap.add_argument("--exporter", choices=["torchscript", "dynamo"], default="torchscript")
    ap.add_argument("--opset", type=int, default=17)
    ap.add_argument("--dtype", choices=["float32", "float16", "bfloat16"], default="float32",
                    help="the weights' and activations' type (PyTorch's reference in it too)")
    ap.add_argument("--attention", choices=["eager", "sdpa"], default="eager",
                    help="the models' attention implementation (sdpa with --exporter dynamo "
                         "--opset 23: ONNX's Attention op where the model uses PyTorch's SDPA)")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--timeout", type=int, default=300)
    ap.add_argument("--keep", help="keep the exported models and inputs in this folder")
    a = ap.parse_args()
    irc = os.path.abspath(a.irc)
    import transformers
    rows = run_rows(a.types.split(","), lambda n, work: row(n, irc, work, a), a.keep)
    tol = 1e-4 if a.dtype == "float32" else 2e-2
    ok = within(rows, tol)
    lines = [f"# transformers zoo through irc (torch {torch.__version__}, transformers "
             f"{transformers.__version__}, {a.exporter} exporter, opset {a.opset}, {a.attention} attention, device {a.device})", "",
             f"Random weights, width {WIDTH_V}, 2 layers, {a.dtype}; rel. error of the first output "
             f"against PyTorch eager. {ok} of {len(rows)} within {tol:g}.", "",
             "| type | export | import | run | rel. error | run s |", "|---|---|---|---|---|---|"]
    for r in rows:
        name = r["type"] + (" (eager attention)" if r.get("attention") == "eager" else "")
        lines.append("| " + " | ".join([name] + [str(r.get(k, "-")) for k in
                                                 ("export", "import", "run", "rel_err", "run_s")]) + " |")
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "hf_zoo.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
