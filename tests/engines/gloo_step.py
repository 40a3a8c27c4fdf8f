"""One training step of a tiny model as the rank map lays it out, started by launch.sh's torchrun
lines with the gloo backend on CPU (test_torchrun_step.py).

Each rank reads its row of rankmap.json (AMP_RANKMAP): its stage, replica, tensor rank and layers.
AMP_RANKMAP and AMP_OUT may each name several files and folders (joined by os.pathsep): the step then
runs once per rank map, one after another in the same processes (a rank map changed by hand beside
the export's own, without a second torchrun start: each start imports torch in every rank and agent).
It builds those layers of a chain of num_layers small linear layers, takes activations from the rank
of the stage before (same replica and tensor rank), runs its layers, sends on to the stage after, and
back again with gradients: GPipe over the rank map's micro-batches. Every activation carries the
number of the next layer it must meet, and each layer refuses one meant for another, so activations
flow through the layers in order or the step fails. Gradients are then averaged over each data-parallel
group (the ranks of one stage and tensor rank) and an SGD step is taken. Each rank writes what it did
to AMP_OUT/rank-N.json: where torchrun put it (node rank, local rank), its layers, its peers and its
data-parallel group, and the loss where it holds the last stage.
"""

import datetime
import json
import os

import torch
import torch.distributed as dist

WIDTH = 8


class Layer(torch.nn.Module):
    def __init__(self, index: int):
        super().__init__()
        self.index = index
        self.linear = torch.nn.Linear(WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tag = x[:, -1]
        if not torch.all(tag == self.index):
            raise RuntimeError(f"layer {self.index} got activations meant for layer {int(tag[0])}")
        return torch.cat([torch.tanh(self.linear(x[:, :-1])), tag[:, None] + 1], dim=1)


def main() -> None:
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    maps, outs = os.environ["AMP_RANKMAP"].split(os.pathsep), os.environ["AMP_OUT"].split(os.pathsep)
    assert len(maps) == len(outs), (maps, outs)
    for rankmap, out in zip(maps, outs):
        step(json.load(open(rankmap)), out)
    dist.destroy_process_group()


def step(plan: dict, out: str) -> None:
    """One training step as `plan` (a rank map) lays it out; what this rank did goes to out/rank-N.json."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    rows = plan["ranks"]
    assert len(rows) == world, (len(rows), world)
    me = rows[rank]

    def peer(stage: int):
        found = [r["rank"] for r in rows if (r["stage"], r["dp_replica"], r["tp_rank"]) ==
                 (stage, me["dp_replica"], me["tp_rank"])]
        return found[0] if found else None

    groups = {}
    for key in sorted({(r["stage"], r["tp_rank"]) for r in rows}):     # every rank creates every group
        members = sorted(r["rank"] for r in rows if (r["stage"], r["tp_rank"]) == key)
        groups[key] = (members, dist.new_group(members))
    dp_members, dp_group = groups[(me["stage"], me["tp_rank"])]
    before, after = peer(me["stage"] - 1), peer(me["stage"] + 1)

    torch.manual_seed(0)      # every rank builds the same chain, then keeps its own layers
    chain = [Layer(i) for i in range(plan["stages"][-1]["last_layer"] + 1)]
    layers = torch.nn.Sequential(*chain[me["first_layer"]:me["last_layer"] + 1])
    micro, size = plan["num_micro_batches"], plan["micro_batch_size"]
    generator = torch.Generator().manual_seed(1000 + me["dp_replica"])
    inputs, outputs, losses = [], [], []
    for _ in range(micro):                       # forward, micro-batch by micro-batch
        if before is None:
            x = torch.cat([torch.randn(size, WIDTH, generator=generator), torch.zeros(size, 1)], dim=1)
        else:
            x = torch.empty(size, WIDTH + 1)
            dist.recv(x, src=before)
        x.requires_grad_(True)
        y = layers(x)
        inputs.append(x)
        outputs.append(y)
        if after is not None:
            dist.send(y.detach(), dst=after)
    for x, y in zip(reversed(inputs), reversed(outputs)):     # backward, last micro-batch first
        if after is None:
            assert torch.all(y[:, -1] == len(chain)), "activations left the last stage before the last layer"
            loss = (y[:, :-1] ** 2).mean() / micro
            losses.append(float(loss))
            loss.backward()
        else:
            grad = torch.empty_like(y)
            dist.recv(grad, src=after)
            y.backward(grad)
        if before is not None:
            dist.send(x.grad, dst=before)
    for parameter in layers.parameters():       # data parallelism: average over the replicas
        dist.all_reduce(parameter.grad, group=dp_group)
        parameter.grad /= len(dp_members)
    torch.optim.SGD(layers.parameters(), lr=0.1).step()
    dist.barrier()
    report = {"rank": rank, "node": int(os.environ["GROUP_RANK"]), "local_gpu": int(os.environ["LOCAL_RANK"]),
              "layers": [layer.index for layer in layers], "before": before, "after": after,
              "dp_group": dp_members, "micro_batches": len(inputs), "loss": sum(losses) if losses else None}
    with open(os.path.join(out, f"rank-{rank}.json"), "w") as handle:
        json.dump(report, handle)


if __name__ == "__main__":
    main()
