"""The benchmark window's ramp (model/window.py) by hand: a round trip of fixed TPOT and TTFT makes the fluid
model's terms plain arithmetic."""

import math

import numpy as np
import pytest

from amp_tui.serving.model.window import benchmark_window
from amp_tui.serving.spec import Serving

SERVING = Serving(prompt_tokens=100, output_tokens=50)      # one kind of request: reserves 150 tokens


class FixedTrip:
    """TPOT 1 s and TTFT 2 s whatever the load."""

    def __call__(self, decode_rate, prompt_rate=None):
        return 1.0, 2.0, np.zeros((3, 1))


def test_the_ramp_grows_by_the_prompts_in_flight_over_ttft():
    # 20 prompts in flight, each done in 2 s and replaced at once: 10 requests/s start decoding; none finishes
    # before 50 tokens x 1 s. Ticks of 1 s (a quarter of TTFT, at most 20 a step): decode = decoding / TPOT
    trace = []
    decode, prompt = benchmark_window(FixedTrip(), SERVING, 1e9, 0.0, 40.0, 20, trace=trace)
    assert [(t, n, q) for t, n, q, *_ in trace] == [(0.0, 20.0, 20.0), (20.0, 220.0, 20.0)]
    assert decode == pytest.approx(sum(10 * k for k in range(40)) / 40)      # decoding requests by the second
    assert prompt == pytest.approx(20 / 2 * 100)                              # 10 prompts/s of 100 tokens


def test_admission_stops_the_ramp_and_the_prompts_in_flight_run_out():
    # room for 100 requests of 150 tokens: reached at 8 s (20 + 10 x 8); no launch after, so the 20 prompts in
    # flight finish at 1 / TTFT each: 20 e^(-12 / 2) remain at 20 s, the rest decoding
    trace = []
    benchmark_window(FixedTrip(), SERVING, 150.0 * 100, 0.0, 40.0, 20, trace=trace)
    t, n, q = trace[1][:3]
    assert t == 20.0 and n == pytest.approx(100.0)
    assert q == pytest.approx(20 * math.exp(-12 / 2), rel=0.05)


def test_answers_finish_after_their_output_and_launch_the_next_request():
    # TPOT 1 s, 50 output tokens: the requests that start decoding in each second (10 of them) finish 50 s
    # later, from the second that ends at 51 s, and each launches one more: the prompts in flight grow past
    # the initial 20 only then, by 10 a second
    trace = []
    benchmark_window(FixedTrip(), SERVING, 1e9, 0.0, 80.0, 20, step_s=10.0, trace=trace)
    prompts = {t: q for t, _, q, *_ in trace}
    assert prompts[50.0] == pytest.approx(20.0)
    assert prompts[60.0] == pytest.approx(20.0 + 10 * 10)
    assert prompts[70.0] == pytest.approx(20.0 + 10 * 20)
