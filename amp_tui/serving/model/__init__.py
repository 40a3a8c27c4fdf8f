"""The serving model: what a serving system measures for a placement, from named terms.

Decode and prompt tokens/s, time to first token (TTFT) and time per output token (TPOT), offline or
at a request rate, composed in predict.py from:

  kv.py        KV-cache room: each machine's context tokens per layer for the layers it holds, summed
               over the machines holding a layer; how many requests admission lets in at once
  compute.py   a machine's step: decode time per layer by batch, prompt time per layer by tokens (the
               profile), the host copy of received activations; its wave (one pass of a batch over the
               layers it runs) and how long a token stays
  network.py   a hop: its latency, the bytes a token carries over its bandwidth, and the wait behind
               prompts sent on the same link
  routing.py   which machines and hops a request visits and how often, from the max flow (the routes
               requests are sent on, weighted by their flow)
  predict.py   the closed loop: requests in flight over the time one token takes to go round

Every term is a plain function checked by hand in tests/serving/test_serving_model_terms.py.
"""
