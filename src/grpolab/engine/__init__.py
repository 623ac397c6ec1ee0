"""Generation and forward passes of a policy, on the CPU or a CUDA GPU (the run's ``device``:
``grpolab.devices``): what turns prompts into scored completions and completions into log-probabilities.

* ``collect``: one scored rollout batch (encode -> sample -> score), used by training, evaluation,
  ``grpolab gradients`` and ``grpolab mechanism``;
* ``rollout``: sampling with a KV cache and per-token log-probabilities, through the transformers forward
  or the lean paths below;
* ``fast_decode``: a lean Llama-family decoder (preallocated KV cache, bf16 weight copies; on CUDA a static-shape
  step over length buckets of a bfloat16 cache), kept per model across rollouts by ``rollout``;
* ``weight_copy``: that decoder's weight copy, written once and refreshed in place before each rollout;
* ``static_decode``: the sampling loop of that static step, the token drawn inside the step, each bucket's step
  replayed as a CUDA graph;
* ``token_draw``: one token per row from logits (temperature, top-p, inverse-CDF draw), entropy and log-prob;
* ``lean_forward``: a lean Llama-family training forward with autograd;
* ``prefix_packing``: the update's forward with each prompt computed once for its whole group.
* ``memory``: estimates of the memory sampling and the update need, and the memory available;
* ``fit``: the one-line refusals, before anything is sampled, of settings that do not fit the model's
  context or the memory available.

Nothing here knows about advantages, losses or runs (``grpolab.train``).
"""
