"""Whole training iterations on one GPU: what `amp-tui calibrate` fits the cost model to.

`amp-tui profile SCENARIO --iterations` builds the scenario's whole model at tp = pp = dp = 1 from
the same plain-PyTorch layers the profile times (torch_layers.py), and runs real iterations of the
scenario's global batch: zero the gradients, forward and backward each micro-batch (gradients
accumulate), one AdamW step. Per micro-batch size, without and with full recomputation
(torch.utils.checkpoint around each block), it records the median iteration time and the peak
memory; a strategy that runs out of memory is recorded as such. The result is a measurements file
(core/calibration/measurements.py) for `amp-tui calibrate`.
"""

from __future__ import annotations

import statistics

from amp_tui.core.calibration.measurements import Measurement, measurements_yaml
from amp_tui.core.spec.scenario import Scenario
from amp_tui.core.spec.strategy import Strategy
from amp_tui.profiling.backend import Device
from amp_tui.profiling.measure import build_layer
from amp_tui.profiling.shapes import layer_shapes


def build_model(scenario: Scenario, device: Device, sequence: int):
    """The scenario's model as one torch module at tp = 1: its layers in order (repeats expanded);
    layers without a plain-PyTorch form pass their input through."""
    torch = device.torch
    import torch.utils.checkpoint  # noqa: F401 - torch.utils.checkpoint is a submodule to load

    model = scenario.model
    shapes, _ = layer_shapes(model, sequence)
    by_index = {shape.index: shape for shape in shapes}
    by_identity = {(s.name, s.params, s.flops): s for s in shapes}
    layers = []
    with device.device:       # weights made where they run (a CPU-side init of GBs is slow)
        for index, group in enumerate(model.groups):
            shape = by_index.get(index) or by_identity.get((group.name, group.params, group.flops))
            if shape is None:
                continue
            for _ in range(group.repeat):
                layers.append((shape, build_layer(shape, 1, 1, False)))

    class Whole(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList(module for _, module in layers)
            self.kinds = [shape.build for shape, _ in layers]
            self.recompute = False

        def forward(self, ids):
            x = ids
            for kind, layer in zip(self.kinds, self.layers):
                if kind in ("head", "loss"):
                    return layer(x, ids)
                if kind == "block" and self.recompute:
                    x = torch.utils.checkpoint.checkpoint(layer, x, use_reentrant=False)
                else:
                    x = layer(x)
            return x.float().mean()      # a model without a loss layer: any scalar to backpropagate

    return Whole().to(device.device)


def run_iterations(scenario: Scenario, device: Device, micro_batches: list[int], *, sequence: int,
                   iterations: int = 3, recompute: tuple[bool, ...] = (False, True), on_result=None
                   ) -> list[Measurement]:
    """Measured iterations (tp = pp = dp = 1) for each micro-batch size dividing the global batch,
    without and with full recomputation. `on_result(measurement)` sees each as it is measured."""
    torch = device.torch
    batch = scenario.training.global_batch_size
    sizes = [m for m in micro_batches if batch % m == 0]
    vocab = int(scenario.model.shape.get("vocab_size") or 2)
    out: list[Measurement] = []
    for full in recompute:
        for micro_batch in sizes:
            strategy = Strategy(1, 1, 1, micro_batch, recompute="full" if full else "none")
            model = optimizer = None
            try:
                torch.manual_seed(0)
                model = build_model(scenario, device, sequence)
                model.recompute = full
                optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, foreach=device.kind == "cuda")
                steps = batch // micro_batch
                ids = [torch.randint(0, vocab, (micro_batch, sequence), device=device.device) for _ in range(steps)]

                def iteration():
                    optimizer.zero_grad(set_to_none=True)
                    for chunk in ids:
                        with device.autocast():
                            loss = model(chunk) / steps
                        loss.backward()
                    optimizer.step()

                device.reset_peak()
                times = [device.time_once(iteration) for _ in range(device.warmups + iterations)][device.warmups:]
                peak = device.peak_since(0.0)      # the whole run's: weights, optimizer state, activations
                measurement = Measurement(len(out), strategy, statistics.median(times), peak)
            except RuntimeError as err:
                if not device.out_of_memory(err):
                    raise
                measurement = Measurement(len(out), strategy, None, None, out_of_memory=True)
            finally:
                del model, optimizer
                device.free()
            out.append(measurement)
            if on_result is not None:
                on_result(measurement)
    return out


def iterations_yaml(measurements: list[Measurement], scenario: Scenario, device: Device, iterations: int) -> str:
    header = (f"# amp-tui profile --iterations: {scenario.model.name} on {device.name}, tp = pp = dp = 1, global batch "
              f"{scenario.training.global_batch_size}, plain PyTorch (AdamW, {scenario.training.precision} autocast);\n"
              f"# median of {iterations} iterations after {device.warmups} warm-ups. Fit with: "
              "amp-tui calibrate SCENARIO THIS_FILE -o calibrated.yaml\n")
    return measurements_yaml(measurements, header)
