"""Interleaved pipelines as pp x v chunks in model order (core/spec/chunks.py)."""

from hypothesis import given
from hypothesis import strategies as st

from amp_tui.core.search.evaluate import evaluate
from amp_tui.core.spec.chunks import interleaved_chunks, rank_partition
from amp_tui.core.spec.scenario import load_scenario
from amp_tui.core.spec.strategy import Strategy, parse_strategy


@given(partition=st.lists(st.integers(1, 40), min_size=1, max_size=8), v=st.integers(1, 6))
def test_chunks_keep_each_ranks_layers_and_split_them_evenly(partition, v):
    chunks = interleaved_chunks(tuple(partition), v)
    assert len(chunks) == len(partition) * v and sum(chunks) == sum(partition)
    assert rank_partition(chunks, len(partition)) == tuple(partition)
    for s in range(len(partition)):
        mine = chunks[s::len(partition)]
        assert max(mine) - min(mine) <= 1 and list(mine) == sorted(mine, reverse=True)


def test_chunk_placement_by_hand():
    # rank 0 holds 9 layers, rank 1 holds 23; 4 chunks each: chunk a * 2 + s on rank s
    assert interleaved_chunks((9, 23), 4) == (3, 6, 2, 6, 2, 6, 2, 5)


def test_a_strategy_given_as_chunks_is_read_as_the_layers_per_rank():
    scenario = load_scenario("paper-homogeneous")
    chunked = parse_strategy({"tp": 1, "pp": 4, "dp": 4, "micro_batch_size": 1, "virtual_stages": 2,
                              "partition": [5, 3, 3, 5, 4, 3, 3, 4]})
    assert chunked.partition == (9, 6, 6, 9)
    per_rank = Strategy(1, 4, 4, 1, (9, 6, 6, 9), virtual_stages=2)
    assert evaluate(scenario, chunked).iteration_time_s == evaluate(scenario, per_rank).iteration_time_s
    out = evaluate(scenario, chunked).strategy.to_dict()
    assert out["partition"] == [9, 6, 6, 9] and out["chunks"] == [5, 3, 3, 5, 4, 3, 3, 4]
    assert parse_strategy(out).partition == (9, 6, 6, 9)         # output reads back
    # without interleaving there are no chunks to list
    assert "chunks" not in evaluate(scenario, Strategy(1, 4, 4, 1, (9, 6, 6, 9))).strategy.to_dict()
