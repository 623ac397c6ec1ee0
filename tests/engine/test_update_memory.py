"""The update's whole part of the memory estimate (``memory.update_bytes`` + ``memory.activation_bytes`` + autocast's
weight copies) against the peak resident memory a forward and backward of one micro-batch at the length cap add, in
a fresh process: ``VmHWM`` of /proc/self/status, reset just before (``ru_maxrss`` would carry the pytest process's
size across ``exec``). The estimate is a lower bound, so it must stay below. Measured on this CPU: 0.28-0.52 of
it; the rest is the float32 chunks of the target log-probs, the backward's transient gradients and the
allocator's slack. (A layer's activations alone, against what autograd saves: ``test_update_activations.py``.)
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

_RESIDENT = r"""
import json, sys
import torch
torch.set_num_threads(1)
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM
from grpolab.config import TrainConfig
from grpolab.engine import memory
from grpolab.train.batch import StepBatch
from grpolab.train.forward import policy_logprobs
from grpolab.train.lifecycle import wrap_lora

family, lora, dtype = sys.argv[1], sys.argv[2] == "lora", sys.argv[3]
vocab, groups, samples, prompt, new = 4096, 8, 8, 16, 64
torch.manual_seed(0)
config_class, model_class = {"llama": (LlamaConfig, LlamaForCausalLM), "qwen2": (Qwen2Config, Qwen2ForCausalLM)}[family]
model = model_class(config_class(vocab_size=vocab, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                                 tie_word_embeddings=True, pad_token_id=0))
config = TrainConfig(lora=lora, dtype=dtype, lora_r=8)
if lora:
    model = wrap_lora(model, config)
generator = torch.Generator().manual_seed(1)
rows = groups * samples
prompts = torch.randint(1, vocab, (groups, prompt), generator=generator).repeat_interleave(samples, dim=0)
batch = StepBatch(problems=[], prompt_ids=prompts, prompt_mask=torch.ones(rows, prompt, dtype=torch.long),
                  completion_ids=torch.randint(1, vocab, (rows, new), generator=generator),
                  completion_mask=torch.ones(rows, new, dtype=torch.long), rewards=None, texts=[""] * rows,
                  truncated=torch.zeros(rows, dtype=torch.bool), entropy=torch.zeros(rows, new))
shape, values = memory.model_shape(model), memory.compute_bytes(dtype)
estimate = (memory.update_bytes(shape, rows, new, values)
            + memory.activation_bytes(shape, memory.update_tokens(rows, samples, prompt, new), values)
            + memory.autocast_copy_bytes(model, dtype))
def status(field):  # bytes; VmHWM: this process's peak resident memory since exec or the last reset
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith(field)) * 1024

try:
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")  # reset VmHWM to the memory resident now
except OSError:
    pass
resident, highest = status("VmRSS"), status("VmHWM")
policy_logprobs(model, batch, list(range(rows)), config).sum().backward()
print(json.dumps({"estimate": estimate, "added": status("VmHWM") - resident, "earlier": highest - resident}))
"""


@pytest.mark.parametrize(("family", "lora", "dtype"), [("llama", True, "bfloat16"), ("llama", False, "float32"),
                                                       ("qwen2", True, "bfloat16")])
def test_a_micro_batchs_forward_and_backward_add_more_resident_memory_than_the_update_estimate(
        family: str, lora: bool, dtype: str) -> None:
    done = subprocess.run([sys.executable, "-c", _RESIDENT, family, "lora" if lora else "full", dtype],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["earlier"] < found["estimate"] / 4  # the high-water mark before the step hides little of it
    assert found["estimate"] <= found["added"], found
