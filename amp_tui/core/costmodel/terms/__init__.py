"""The cost model's terms, one family per module, pure functions each checked by hand in its
tests; core/costmodel/layer_times.py and cost.py compose them.

  compute.py   a layer's forward time from its matrix shapes, recomputation, activations kept
               under each technique (sequence/context parallelism, recomputation), ZeRO-3's
               per-layer parameter traffic
  context.py   context parallelism: ring attention's key-value sends, what the attention steps
               do not hide
  experts.py   mixture of experts: all-to-all dispatch and combine, expert memory over ep
  sharding.py  hybrid sharded data parallelism (HSDP): the shard group, its ring and the replica
               all-reduce of the gradient shard
  shares.py    uneven data-parallel shares: each replica's pipeline time, the best whole
               micro-batch counts per replica (composed in core/costmodel/shares.py)
"""
