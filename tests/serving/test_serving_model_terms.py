"""The serving model's terms, each by hand on a two-machine case (model/*.py)."""

import math

import numpy as np
import pytest

from amp_tui.serving.model.compute import FRAGMENTATION, machine_load, receive_copy_s, RECEIVE_COPY_BYTES_PER_S
from amp_tui.serving.model.kv import admission, admitted_requests, feeder_requests, reserve_tokens, room_per_layer
from amp_tui.serving.model.network import decode_hop_s, link_wait_s, prompt_hop_s
from amp_tui.serving.model.predict import admitted_routing, predict
from amp_tui.serving.model.routing import Hop, Routing
from amp_tui.serving.profile import parse_profile
from amp_tui.serving.spec import Serving

PROFILE = parse_profile({"decode_ms_per_layer": {1: 2.0, 100: 4.0}, "prompt_ms_per_layer": {1000: 10.0},
                         "kv_tokens_per_layer": {1: 10_000, 2: 4_000}, "max_decode_batch": {1: 64, 2: 64}})
SERVING = Serving(prompt_tokens=100, output_tokens=50, kv_fill=0.8)


def test_profile_interpolates_and_extends():
    assert PROFILE.decode_step_s(1) == pytest.approx(2e-3)
    assert PROFILE.decode_step_s(0.2) == pytest.approx(2e-3)            # below the smallest batch: its cost
    assert PROFILE.decode_step_s(50.5) == pytest.approx(3e-3)           # halfway: halfway
    assert PROFILE.decode_step_s(199) == pytest.approx(6e-3)            # past the last point: its slope
    assert PROFILE.prompt_step_s(500) == pytest.approx(5e-3)            # from (0, 0)


def _chain(*shares):
    """Hops coordinator -> 0 -> 1 -> coordinator (or the given (sender, receiver, share) triples)."""
    edges = shares or ((-1, 0, 1.0), (0, 1, 1.0), (1, -1, 1.0))
    return tuple(Hop(share, 1e-3, 1e9, sender >= 0 and receiver >= 0, sender, receiver)
                 for sender, receiver, share in edges)


def test_kv_room_and_the_feeders_admission_by_hand():
    # machine 0 holds layers 0-1 (4,000 tokens per layer at 2 layers), machine 1 layer 2 (10,000 at 1 layer)
    kv = np.array([4_000.0, 10_000.0])
    first, count = np.array([0, 2]), np.array([2, 1])
    room = room_per_layer(kv, first, count, 3)
    assert list(room) == [4_000, 4_000, 10_000]
    assert reserve_tokens(SERVING) == 150
    # feeder: the fullest layer (0 or 1) reaches 0.8 x 4,000 at 150 tokens a request
    # router: machine 0 takes requests while 300 x n + 300 <= 0.85 x 8,000 (n < 21.7): the feeder binds first
    admitted, rule = admitted_requests(_chain(), first, count, kv, 3, SERVING, 150.0)
    assert rule == "feeder" and admitted == pytest.approx(0.8 * 4_000 / 150)
    assert feeder_requests(room, SERVING, 150.0) == pytest.approx(admitted)


def test_the_router_stops_a_run_when_a_machine_every_route_crosses_is_full():
    # machine 0 holds layer 0 (10,000 tokens), machine 1 layer 1 (2,000): the feeder would stop at
    # 0.8 x 2,000 / 150 = 10.67 requests, but machine 1 is skipped once 150 n + 150 > 0.85 x 2,000, at
    # n = 10.33, and with no other machine for layer 1 every launch is then dropped
    kv = np.array([10_000.0, 2_000.0])
    admitted, rule = admitted_requests(_chain(), np.array([0, 1]), np.array([1, 1]), kv, 2, SERVING, 150.0)
    assert rule == "router" and admitted == pytest.approx((0.85 * 2_000 - 150) / 150)


def test_the_router_sends_round_a_full_machine_while_another_has_room():
    # a one-layer model on two machines the coordinator splits 70 / 30: machine 0 keeps 2,000 tokens, machine 1
    # 10,000. Machine 0 fills (70% of 150 tokens a launch) at (0.85 x 2,000 - 150) / 105 = 14.76 launches; from
    # then on every request goes to machine 1, which the feeder (0.8 x 12,000 over both) stops first:
    # 14.76 x 150 + 150 m = 9,600 -> m = 49.24, 64 requests in all; machine 1 alone would have let in 66
    hops = _chain((-1, 0, 0.7), (-1, 1, 0.3), (0, -1, 0.7), (1, -1, 0.3))
    kv = np.array([2_000.0, 10_000.0])
    admitted, rule = admitted_requests(hops, np.array([0, 0]), np.array([1, 1]), kv, 1, SERVING, 150.0)
    assert rule == "feeder" and admitted == pytest.approx(0.8 * 12_000 / 150)
    # a receiver of under 5% of its sender's flow is never picked (Helix's router): the same with a 97 / 3 split
    # fills machine 0 and then drops every launch
    hops = _chain((-1, 0, 0.97), (-1, 1, 0.03), (0, -1, 0.97), (1, -1, 0.03))
    admitted, rule = admitted_requests(hops, np.array([0, 0]), np.array([1, 1]), kv, 1, SERVING, 150.0)
    assert rule == "router" and admitted == pytest.approx((0.85 * 2_000 - 150) / 150)


def test_admitted_requests_stay_where_the_router_put_them():
    # the 70 / 30 split of a one-layer model, machine 1 keeping 3,000 tokens: machine 0 fills at 14.76 launches as
    # above (10.33 requests held, 4.43 on machine 1); then machine 1 takes every request until 150 n + 150 passes
    # 0.85 x 3,000 (2,400 tokens held, 16 requests), below the feeder's 0.8 x 5,000: the router stops the run at
    # 10.33 + 16 requests, 39% on machine 0 where the max flow sends 70%
    hops = _chain((-1, 0, 0.7), (-1, 1, 0.3), (0, -1, 0.7), (1, -1, 0.3))
    first, count = np.array([0, 0]), np.array([1, 1])
    admitted = admission(hops, first, count, np.array([2_000.0, 3_000.0]), 1, SERVING, 150.0)
    assert admitted.rule == "router" and admitted.requests == pytest.approx(1_550 / 150 + 16)
    assert admitted.held == pytest.approx([1_550 / 150, 16.0])
    # predict serves the requests in flight where they were admitted: the route's visits are the held shares
    small, large = (parse_profile({"decode_ms_per_layer": {1: 2.0}, "prompt_ms_per_layer": {1000: 10.0},
                                   "kv_tokens_per_layer": {1: kv}, "max_decode_batch": {1: 64}}) for kv in (2_000, 3_000))
    route = Routing(visits=np.array([0.7, 0.3]), layers=np.array([1.0, 1.0]), hops=hops, flow_tokens_per_s=1e6)
    routed, admitted = admitted_routing(route, [small, large], first, count, 1, SERVING)
    assert admitted.rule == "router"
    assert routed.visits == pytest.approx(np.array([1_550 / 150, 16.0]) / admitted.requests)
    # where the feeder stops the run (machine 1 keeping 10,000 tokens, the case above) the max flow's shares stay
    large = parse_profile({"decode_ms_per_layer": {1: 2.0}, "prompt_ms_per_layer": {1000: 10.0},
                           "kv_tokens_per_layer": {1: 10_000}, "max_decode_batch": {1: 64}})
    routed, admitted = admitted_routing(route, [small, large], first, count, 1, SERVING)
    assert admitted.rule == "feeder" and list(routed.visits) == [0.7, 0.3]


def test_hop_terms_by_hand():
    hop = Hop(share=1.0, latency_s=1e-3, bandwidth=1e6, activations=True, sender=0, receiver=1)
    token = (1000 + 2) / 1e6                              # one token's activations and its id over 1 MB/s
    prompt = 100 * token
    # 2 prompts/s and 10 tokens/s cross it: busy 0.2 + 0.01002; Pollaczek-Khinchine wait
    busy = 2 * prompt + 10 * token
    wait = (2 * prompt ** 2 + 10 * token ** 2) / (2 * (1 - busy))
    assert link_wait_s(hop, 10, 2, 100, 1000) == pytest.approx(wait)
    assert decode_hop_s(hop, 10, 2, 100, 1000) == pytest.approx(1e-3 + token + wait)
    assert prompt_hop_s(hop, 10, 2, 100, 1000) == pytest.approx(1e-3 + prompt + wait)
    assert math.isinf(link_wait_s(hop, 0, 20, 100, 1000))      # 20 prompts of 0.1 s each: saturated


def test_machine_wave_and_residence_by_hand():
    assert receive_copy_s(1000, 1000) == pytest.approx(1e6 / RECEIVE_COPY_BYTES_PER_S)
    # almost no traffic: one token per wave, two layers at 2 ms, the copy of one token's activations
    load = machine_load(PROFILE, 2, 2, 1e-6, 0.0, 100, 1000)
    wave = 2 * 2e-3 + receive_copy_s(1, 1000)
    assert load.batch == 1.0
    assert load.wave_s == pytest.approx(wave)
    assert load.residence_s == pytest.approx(FRAGMENTATION * wave, rel=1e-4)
    # prompts make the machine busier and its tokens stay longer
    busier = machine_load(PROFILE, 2, 2, 50, 5.0, 100, 1000)
    assert busier.busy > load.busy and busier.residence_s > load.residence_s


def test_closed_loop_obeys_littles_law_and_the_kv_bound():
    hops = (Hop(1.0, 1e-3, 1e9, False, -1, 0), Hop(1.0, 1e-3, 1e9, True, 0, 1), Hop(1.0, 1e-3, 1e9, False, 1, -1))
    route = Routing(visits=np.array([1.0, 1.0]), layers=np.array([2.0, 1.0]), hops=hops, flow_tokens_per_s=1e6)
    p = predict(route, [PROFILE, PROFILE], np.array([0, 2]), np.array([2, 1]), 3, SERVING, 1000)
    assert p.limited_by == "kv cache"
    assert p.requests_in_flight == pytest.approx(p.admitted_requests, rel=1e-3)
    life = p.ttft_s + SERVING.output_tokens * p.tpot_s
    assert p.requests_in_flight == pytest.approx(p.decode_tokens_per_s * life / SERVING.output_tokens, rel=1e-3)
    assert p.prompt_tokens_per_s == pytest.approx(p.decode_tokens_per_s * 100 / 50)
