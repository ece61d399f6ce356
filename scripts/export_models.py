#!/usr/bin/env python3
"""Exports transformer models to ONNX for `irc import` / `irc run`, with inputs and PyTorch's
outputs as .npy, on a machine with torch, transformers and timm (the GPU machine). No network:
every model is built from a config with random weights (seeded), never `from_pretrained`.

Models, each in a `tiny` configuration (one layer, hidden 32: the fixtures committed in
tests/onnx_models/hf/), a `small` one (two layers, hidden 64) and a `bench` one (the real
model's sizes):

  gpt2   GPT-2-style decoder        transformers.GPT2LMHeadModel      input_ids, attention_mask [B, S]
  bert   BERT-style encoder         transformers.BertModel            input_ids, attention_mask [B, S]
  llama  Llama-style decoder        transformers.LlamaForCausalLM     input_ids, attention_mask [B, S]
  vit    Vision transformer         timm VisionTransformer            x (pixels) [B, 3, H, W]
  roberta RoBERTa-style encoder     transformers.RobertaModel         input_ids, attention_mask [B, S]
          (position ids: CumSum)
  resnet ResNet-D (ResNet-50 at      timm ResNet                       x (pixels) [B, 3, H, W]
         bench size)

Usage:
    python3 scripts/export_models.py --out models [--size tiny|small|bench|all] [--models gpt2,bert,...]
                                     [--batch 1,8] [--device cpu|cuda] [--time]
                                     [--dtype float32|float16|bfloat16]
                                     [--exporter torchscript|dynamo] [--opset N]
                                     [--attention eager|sdpa]
    python3 scripts/export_models.py --out tests/onnx_models/hf --size tiny   # the fixtures

For each model it writes OUT/<model>_<size>.onnx, OUT/<model>_<size>.<input>.npy and
OUT/<model>_<size>.out0.npy (PyTorch eager, float32), and prints the irc commands to check it.
With `--batch 1,8` the batch of the configuration is replaced by each one given in turn and
the files are OUT/<model>_<size>_b<B>.*. With `--device cuda` the model is exported and its
reference computed on the GPU (TF32 off, so float32 as on the CPU): much faster at the bench
sizes. A model over 2 GB has its weights in external data (the TorchScript exporter writes one
file per tensor, the dynamo exporter one file): either way it is re-saved as OUT/<stem>.onnx
with all its weights in OUT/<stem>.onnx.data, which `irc import` reads from the model's
directory.

    irc import OUT/gpt2_small.onnx -o OUT/gpt2_small.ir
    irc run OUT/gpt2_small.ir --input input_ids=OUT/gpt2_small.input_ids.npy --save-outputs DIR

Notes:
- Shapes are static (irc's graphs are): batch and sequence are fixed at export.
- The text models take an explicit attention mask, its first two positions padding: without
  one, newer transformers look for packed sequences with `torch.diff`, which the TorchScript
  exporter cannot write; with padding, PyTorch's reference checks the mask's handling too.
- Attention is exported in its eager form by default (`attn_implementation="eager"`), so it
  appears as MatMul/Softmax/Where. `--exporter dynamo --opset 23 --attention sdpa` writes what
  current PyTorch writes for these models by default: the dynamo exporter (files STEM_dyn23),
  attention as ONNX's `Attention` op (files STEM_sdpa_dyn23).
- The exporter folds constant subgraphs (`do_constant_folding=True`), so position ids and the
  causal mask become initializers or constant subgraphs that `irc import` folds; Llama's
  rotary tables are Sin/Cos of a constant.
- timm's patch embedding is a Conv2d with stride = kernel, which `irc import` writes as a
  reshape, a transpose and a matmul.
"""
import argparse
import os

import numpy as np
import torch

SEED = 15
# The transformers models' attention implementation (`--attention`): "eager" or "sdpa".
ATTENTION = {"impl": "eager"}

CONFIGS = {
    "gpt2": {
        "tiny": dict(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=16, batch=1, seq=8),
        "small": dict(n_layer=2, n_embd=64, n_head=4, vocab_size=256, n_positions=64, batch=1, seq=16),
        "bench": dict(n_layer=12, n_embd=768, n_head=12, vocab_size=50257, n_positions=1024, batch=1, seq=1024),
    },
    "bert": {
        "tiny": dict(num_hidden_layers=1, hidden_size=32, num_attention_heads=2, intermediate_size=64,
                     vocab_size=64, max_position_embeddings=16, batch=1, seq=8),
        "small": dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=256,
                      vocab_size=256, max_position_embeddings=64, batch=1, seq=16),
        "bench": dict(num_hidden_layers=12, hidden_size=768, num_attention_heads=12, intermediate_size=3072,
                      vocab_size=30522, max_position_embeddings=512, batch=8, seq=512),
    },
    "llama": {
        "tiny": dict(num_hidden_layers=1, hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
                     intermediate_size=48, vocab_size=64, max_position_embeddings=16, batch=1, seq=8),
        "small": dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                      intermediate_size=172, vocab_size=256, max_position_embeddings=64, batch=1, seq=16),
        "bench": dict(num_hidden_layers=16, hidden_size=2048, num_attention_heads=32, num_key_value_heads=8,
                      intermediate_size=8192, vocab_size=32000, max_position_embeddings=2048, batch=1, seq=1024),
    },
    "vit": {
        "tiny": dict(img_size=16, patch_size=8, embed_dim=32, depth=1, num_heads=2, num_classes=10, batch=1),
        "small": dict(img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4, num_classes=10, batch=1),
        "bench": dict(img_size=224, patch_size=16, embed_dim=768, depth=12, num_heads=12, num_classes=1000, batch=8),
    },
    # Position ids from the mask of non-padding tokens (a CumSum), padding index 1.
    "roberta": {
        "tiny": dict(num_hidden_layers=1, hidden_size=32, num_attention_heads=2, intermediate_size=64,
                     vocab_size=64, max_position_embeddings=18, batch=1, seq=8),
        "small": dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=256,
                      vocab_size=256, max_position_embeddings=66, batch=1, seq=16),
        "bench": dict(num_hidden_layers=12, hidden_size=768, num_attention_heads=12, intermediate_size=3072,
                      vocab_size=50265, max_position_embeddings=514, batch=8, seq=512),
    },
    # avg_down: the downsampling shortcut is AvgPool2d(2, ceil_mode=True, count_include_pad=False)
    # and a 1x1 conv (ResNet-D), so the export has MaxPool, AveragePool and Conv with padding.
    "resnet": {
        "tiny": dict(layers=[1, 1, 1, 1], channels=(8, 8, 16, 16), stem_width=8, avg_down=True,
                     img_size=32, num_classes=10, batch=1),
        "small": dict(layers=[1, 1, 1, 1], channels=(16, 32, 64, 128), stem_width=16, avg_down=True,
                      img_size=64, num_classes=10, batch=1),
        "bench": dict(layers=[3, 4, 6, 3], bottleneck=True, img_size=224, num_classes=1000, batch=8),
    },
}


def split(cfg):
    cfg = dict(cfg)
    shape = {k: cfg.pop(k) for k in ("batch", "seq") if k in cfg}
    return cfg, shape


def ids_and_mask(cfg, s):
    """Token ids and an explicit attention mask whose first two positions are padding (so the
    reference checks the mask too). Without a mask, newer transformers
    (masking_utils.find_packed_sequence_indices) look for packed sequences in the position ids
    with `torch.diff`, which the TorchScript exporter cannot write (`aten::diff`); with a mask
    given, that check is skipped and the mask is built from the mask input."""
    ids = torch.randint(0, cfg["vocab_size"], (s["batch"], s["seq"]), dtype=torch.int64)
    mask = torch.ones((s["batch"], s["seq"]), dtype=torch.int64)
    mask[:, :2] = 0
    return {"input_ids": ids, "attention_mask": mask}


def gpt2(cfg):
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg, s = split(cfg)
    model = GPT2LMHeadModel(GPT2Config(**cfg, use_cache=False, attn_implementation=ATTENTION["impl"]))
    return model, ids_and_mask(cfg, s)


def bert(cfg):
    from transformers import BertConfig, BertModel
    cfg, s = split(cfg)
    model = BertModel(BertConfig(**cfg, attn_implementation=ATTENTION["impl"]), add_pooling_layer=False)
    return model, ids_and_mask(cfg, s)


def llama(cfg):
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg, s = split(cfg)
    model = LlamaForCausalLM(LlamaConfig(**cfg, use_cache=False, attn_implementation=ATTENTION["impl"]))
    return model, ids_and_mask(cfg, s)


def vit(cfg):
    from timm.models.vision_transformer import VisionTransformer
    cfg = dict(cfg)
    batch = cfg.pop("batch")
    model = VisionTransformer(**cfg)
    pixels = torch.randn(batch, 3, cfg["img_size"], cfg["img_size"])
    return model, {"x": pixels}


def roberta(cfg):
    from transformers import RobertaConfig, RobertaModel
    cfg, s = split(cfg)
    model = RobertaModel(RobertaConfig(**cfg, attn_implementation=ATTENTION["impl"]), add_pooling_layer=False)
    inputs = ids_and_mask(cfg, s)
    # RoBERTa's padding token is 1: the padded positions hold it, so the position ids'
    # CumSum over the non-padding mask skips them.
    inputs["input_ids"][:, :2] = 1
    inputs["input_ids"][:, 2:] = inputs["input_ids"][:, 2:].clamp(min=2)
    return model, inputs


def resnet(cfg):
    from timm.models.resnet import BasicBlock, Bottleneck, ResNet
    cfg = dict(cfg)
    batch, img = cfg.pop("batch"), cfg.pop("img_size")
    block = Bottleneck if cfg.pop("bottleneck", False) else BasicBlock
    # zero_init_last would zero each block's last norm: the residual branches would add nothing.
    try:
        model = ResNet(block=block, zero_init_last=False, **cfg)
    except TypeError:  # a timm without `channels`: the standard widths
        cfg.pop("channels", None)
        model = ResNet(block=block, zero_init_last=False, **cfg)
    # Batch norm statistics and affine parameters away from (0, 1), so the folded or imported
    # normalization is checked too.
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
    pixels = torch.randn(batch, 3, img, img)
    return model, {"x": pixels}


BUILDERS = {"gpt2": gpt2, "bert": bert, "llama": llama, "vit": vit, "roberta": roberta,
            "resnet": resnet}


class Positional(torch.nn.Module):
    """Calls the model with its inputs as positional arguments and returns one tensor; float
    inputs (ViT's pixels) are given as float32 and cast to the model's `dtype` inside."""

    def __init__(self, model, names, dtype=torch.float32):
        super().__init__()
        self.model, self.names, self.dtype = model, names, dtype

    def forward(self, *args):
        args = [a.to(self.dtype) if a.is_floating_point() else a for a in args]
        out = self.model(**dict(zip(self.names, args)))
        if isinstance(out, (tuple, list)):
            out = out[0]
        elif hasattr(out, "logits"):
            out = out.logits
        elif hasattr(out, "last_hidden_state"):
            out = out.last_hidden_state
        return out


def time_torch(wrapped, args, stem):
    """PyTorch's time for the exported model on the GPU, in its type as exported: eager and
    torch.compile, `triton.testing.do_bench` medians (L2 flushed), written to STEM.torch.json."""
    import json
    import triton
    model = wrapped.cuda()
    xs = tuple(a.cuda() for a in args)
    torch.cuda.synchronize()
    times = {}
    with torch.no_grad():
        times["eager_ms"] = triton.testing.do_bench(lambda: model(*xs), warmup=25, rep=100)
        try:
            compiled = torch.compile(model)
            compiled(*xs)
            times["compile_ms"] = triton.testing.do_bench(lambda: compiled(*xs), warmup=25, rep=100)
        except Exception as e:  # noqa: BLE001 - a baseline failing is recorded
            times["compile_error"] = str(e).strip().splitlines()[-1][:200] if str(e).strip() else type(e).__name__
    with open(stem + ".torch.json", "w") as f:
        json.dump(times, f)
    try:
        torch._dynamo.reset()  # the compiled model's graphs and their memory
    except Exception:  # noqa: BLE001 - only housekeeping
        pass


def single_data_file(tmp_dir, stem):
    """Moves the export in TMP_DIR to STEM.onnx: as it is when self-contained, else (external
    data, however the exporter laid it out) re-saved with every tensor in STEM.onnx.data."""
    import shutil
    written = os.path.join(tmp_dir, "model.onnx")
    others = [f for f in os.listdir(tmp_dir) if f != "model.onnx"]
    for old in (stem + ".onnx", stem + ".onnx.data"):
        if os.path.exists(old):
            os.remove(old)
    if not others:
        shutil.move(written, stem + ".onnx")
    else:
        import onnx
        m = onnx.load(written, load_external_data=True)
        onnx.save_model(m, stem + ".onnx", save_as_external_data=True, all_tensors_to_one_file=True,
                        location=os.path.basename(stem) + ".onnx.data", size_threshold=1024)
        print(f"{stem}.onnx: weights in external data ({len(others)} file(s) from the exporter), "
              f"re-saved as {os.path.basename(stem)}.onnx.data", flush=True)
    shutil.rmtree(tmp_dir)


DTYPES = {"float32": (torch.float32, ""), "float16": (torch.float16, "_f16"),
          "bfloat16": (torch.bfloat16, "_bf16")}


def export(name, size, out_dir, opset, timed=False, batch=None, device="cpu", dtype="float32",
           exporter="torchscript"):
    import shutil
    torch.manual_seed(SEED)
    cfg = dict(CONFIGS[name][size])
    if batch is not None:
        cfg["batch"] = batch
    model, inputs = BUILDERS[name](cfg)
    model.eval()
    names = list(inputs)
    torch_dtype, suffix = DTYPES[dtype]
    wrapped = Positional(model.to(torch_dtype), names, torch_dtype).eval().to(device)
    args = tuple(inputs[n].to(device) for n in names)
    if ATTENTION["impl"] != "eager":
        suffix += "_" + ATTENTION["impl"]
    if exporter == "dynamo":
        suffix += f"_dyn{opset}"
    stem = os.path.join(out_dir, f"{name}_{size}" + ("" if batch is None else f"_b{batch}") + suffix)
    tmp_dir = stem + ".export"
    shutil.rmtree(tmp_dir, ignore_errors=True)
    os.makedirs(tmp_dir)
    with torch.no_grad():
        ref = wrapped(*args)
        kwargs = dict(input_names=names, output_names=["out0"], opset_version=opset,
                      do_constant_folding=True)
        path = os.path.join(tmp_dir, "model.onnx")
        try:
            if exporter == "dynamo":
                del kwargs["do_constant_folding"]
                # Over 2 GB of weights the protobuf cannot hold them: external data, which
                # `single_data_file` gathers into one file.
                big = sum(p.numel() * p.element_size() for p in wrapped.parameters()) > 1.5e9
                torch.onnx.export(wrapped, args, path, dynamo=True, external_data=big, **kwargs)
            else:
                try:
                    torch.onnx.export(wrapped, args, path, dynamo=False, **kwargs)
                except TypeError:  # a torch without the dynamo switch: TorchScript's exporter
                    torch.onnx.export(wrapped, args, path, **kwargs)
        except (RuntimeError, ValueError) as e:
            if exporter == "dynamo":
                raise
            # Torches that do not switch to external data by themselves past 2 GB ask for it.
            if not any(k in str(e) for k in ("2GB", "2GiB", "2 GB", "external", "protobuf")):
                raise
            print(f"{stem}: over 2 GB, exporting with external data ({str(e).strip()[:120]})", flush=True)
            torch.onnx.export(wrapped, args, path, use_external_data_format=True, **kwargs)
    single_data_file(tmp_dir, stem)
    for n in names:
        np.save(f"{stem}.{n}.npy", inputs[n].numpy())
    np.save(f"{stem}.out0.npy", ref.float().cpu().numpy())
    out_shape = tuple(ref.shape)
    del ref
    if timed:
        time_torch(wrapped, args, stem)
    if timed or device != "cpu":
        del wrapped, model, args
        torch.cuda.empty_cache()
    flags = " ".join(f"--input {n}={stem}.{n}.npy" for n in names)
    print(f"{stem}.onnx  {out_shape}\n  irc import {stem}.onnx -o {stem}.ir\n"
          f"  irc run {stem}.ir {flags} --save-outputs {stem}.irc_out")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="models")
    ap.add_argument("--size", choices=["tiny", "small", "bench", "all"], default="small")
    ap.add_argument("--models", default=",".join(BUILDERS))
    ap.add_argument("--opset", type=int, default=17)
    ap.add_argument("--time", action="store_true",
                    help="also time PyTorch eager and torch.compile on the GPU (STEM.torch.json)")
    ap.add_argument("--batch", default=None,
                    help="comma-separated batch sizes replacing the configuration's (files STEM_bB.*)")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                    help="where to export and compute the reference (cuda: TF32 off)")
    ap.add_argument("--dtype", default="float32", choices=list(DTYPES),
                    help="the weights' and activations' type (files STEM_f16.* / STEM_bf16.*; "
                         "the reference is PyTorch eager in that type, saved as float32)")
    ap.add_argument("--exporter", default="torchscript", choices=["torchscript", "dynamo"],
                    help="PyTorch's TorchScript exporter, or the dynamo one (files STEM_dynOPSET)")
    ap.add_argument("--attention", default="eager", choices=["eager", "sdpa"],
                    help="the transformers models' attention (sdpa at opset 23+ with the dynamo "
                         "exporter: ONNX's Attention op; files STEM_sdpa)")
    a = ap.parse_args()
    ATTENTION["impl"] = a.attention
    os.makedirs(a.out, exist_ok=True)
    versions = {"torch": torch.__version__}
    for mod in ("transformers", "timm", "onnx"):
        try:
            versions[mod] = __import__(mod).__version__
        except ImportError:
            versions[mod] = "missing"
    print("versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()), flush=True)
    sizes = ["tiny", "small", "bench"] if a.size == "all" else [a.size]
    batches = [None] if a.batch is None else [int(b) for b in a.batch.split(",") if b.strip()]
    if a.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    failed = []
    for name in a.models.split(","):
        for size in sizes:
            for batch in batches:
                label = f"{name}_{size}" + ("" if batch is None else f"_b{batch}")
                # One model's export failing (an op the TorchScript exporter cannot write, as
                # `aten::diff` in newer transformers' GPT-2 mask) does not stop the others.
                try:
                    export(name, size, a.out, a.opset, a.time, batch, a.device, a.dtype,
                           a.exporter)
                except Exception as e:  # noqa: BLE001 - reported, the rest go on
                    msg = str(e).strip().splitlines()[-1][:200] if str(e).strip() else type(e).__name__
                    print(f"{label}: export failed: {msg}", flush=True)
                    failed.append(label)
                    if a.device == "cuda":
                        torch.cuda.empty_cache()
    if failed:
        print(f"export failed for: {', '.join(failed)}")


if __name__ == "__main__":
    main()
