"""Network profiles: `profile --network` under torchrun on the CPU (gloo) writes one; a scenario
naming it prices the measured links from it, and `plan` says which links were measured."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from amp_tui.cli import main
from amp_tui.core.base.yamlio import dump_yaml, load_yaml_file
from amp_tui.core.search.evaluate import evaluate
from amp_tui.core.spec.network import parse_network
from amp_tui.core.spec.scenario import load_scenario
from amp_tui.core.spec.strategy import parse_strategy

GiB = 2**30


def profile_doc(intra_busbw: float = 100e9, flow: float = 5e9, aggregate: float = 20e9) -> dict:
    """A network profile of two 8 x A100-80GB nodes, with the figures given (bytes/s)."""
    def allreduce(node, size, busbw):
        return {"test": "allreduce", "scope": "intra", "groups": [0], "nodes": [node], "ranks": 8, "bytes": size,
                "seconds": size / busbw * 2 * 7 / 8}
    rows = [allreduce(node, size, busbw) for node in ("a1", "a2") for size, busbw in
            ((2**20, intra_busbw / 4), (GiB / 4, intra_busbw))]
    rows += [{"test": "p2p", "scope": "intra", "groups": [0], "nodes": ["a1"], "ranks": 2, "bytes": 8192,
              "seconds": 6e-6},
             {"test": "p2p", "scope": "inter", "groups": [0], "nodes": ["a1", "a2"], "ranks": 2, "bytes": 8192,
              "seconds": 2e-5},
             {"test": "p2p", "scope": "inter", "groups": [0], "nodes": ["a1", "a2"], "ranks": 2, "bytes": 64 * 2**20,
              "seconds": 64 * 2**20 / flow},
             {"test": "p2p_all", "scope": "inter", "groups": [0], "nodes": ["a1", "a2"], "ranks": 16,
              "bytes": 64 * 2**20, "seconds": 8 * 64 * 2**20 / aggregate}]
    return {"format": "amp-tui/network/1", "backend": "nccl", "device": "cuda",
            "measured_at": "2026-11-30T10:00:00+00:00", "software": {"torch": "2.13.0", "nccl": "2.27.3"},
            "timing": {"warmups": 2, "repeats": 5}, "world_size": 16, "simulated_nodes": False, "complete": True,
            "rows": len(rows), "groups": [{"name": "8xA100-80GB", "gpu": "A100-80GB",
                                           "device_name": "NVIDIA A100-SXM4-80GB", "gpus_per_node": 8,
                                           "nodes": ["a1", "a2"]}],
            "measurements": rows}


def scenario_file(folder: Path, network: object | None, name: str = "s.yaml") -> Path:
    cluster = {"nodes": [{"gpu": "A100-80GB", "count": 2, "gpus_per_node": 8, "intra_node_bandwidth": "300 GB/s",
                          "inter_node_bandwidth": "400 Gbps"},
                         {"gpu": "A10G", "count": 1, "gpus_per_node": 4, "intra_node_bandwidth": "100 Gbps",
                          "inter_node_bandwidth": "40 Gbps"}]}
    if network is not None:
        cluster["network"] = network
    path = folder / name
    path.write_text(dump_yaml({"name": "measured", "cluster": cluster, "model": {"preset": "gpt3-1.3b"},
                               "training": {"global_batch_size": 64, "precision": "bf16"}}))
    return path


def test_the_measured_figures_are_the_ones_the_profile_holds():
    links = parse_network(profile_doc()).links(0)
    assert links.intra_bandwidth == pytest.approx(100e9)
    assert links.inter_flow_bandwidth == pytest.approx(5e9) and links.inter_bandwidth == pytest.approx(20e9)
    assert (links.intra_latency_s, links.inter_latency_s) == (6e-6, 2e-5)


def test_a_scenario_naming_a_profile_prices_the_measured_links(tmp_path):
    (tmp_path / "net.yaml").write_text(dump_yaml(profile_doc()))
    measured = load_scenario(str(scenario_file(tmp_path, "net.yaml")))
    catalog = load_scenario(str(scenario_file(tmp_path, None, "plain.yaml")))
    a100, a10g = measured.cluster.nodes
    assert a100.measured is not None and a10g.measured is None          # only the kind that was measured
    params = measured.params
    assert a100.link_figures(params)[:3] == pytest.approx((100e9, 20e9, 5e9))
    assert a10g.link_figures(params) == catalog.cluster.nodes[1].link_figures(params)
    # tensor parallelism over 8 GPUs inside an A100 node: slower at 100 GB/s measured than at 300 catalog
    strategy = parse_strategy({"tp": 8, "pp": 1, "dp": 2, "micro_batch_size": 1, "placement": [0, 1],
                               "idle": [{"group": 1, "nodes": 1}]})
    assert evaluate(measured, strategy).iteration_time_s > 1.05 * evaluate(catalog, strategy).iteration_time_s
    # and a faster measured network than the catalog's makes it faster (the bounds still hold: plan agrees)
    (tmp_path / "fast.yaml").write_text(dump_yaml(profile_doc(intra_busbw=900e9, flow=200e9, aggregate=400e9)))
    fast = load_scenario(str(scenario_file(tmp_path, "fast.yaml", "fast-s.yaml")))
    assert evaluate(fast, strategy).iteration_time_s < evaluate(catalog, strategy).iteration_time_s


def test_plan_says_which_links_were_measured(tmp_path, capsys):
    (tmp_path / "net.yaml").write_text(dump_yaml(profile_doc()))
    path = scenario_file(tmp_path, "net.yaml")
    assert main(["plan", str(path), "--top", "2", "--time-limit", "20"]) == 0
    out = capsys.readouterr().out
    assert "links from network profile net.yaml: measured on GPUs with nccl" in out
    assert "group 0 (2 x 8xA100-80GB): measured all-reduce inside a node 100 GB/s bus bandwidth" in out
    assert "group 1 (1 x 4xA10G): not measured (catalog figures): inside a node (pcie), between nodes" in out
    assert main(["plan", str(path), "--top", "2", "--json", "--time-limit", "20"]) == 0
    groups = json.loads(capsys.readouterr().out)["network"]["groups"]
    assert groups[0]["measured"] and not groups[1]["measured"] and groups[1]["catalog"]
    # a saved plan keeps the profile inline, and re-predicts the same
    plan = tmp_path / "plan.yaml"
    assert main(["plan", str(path), "--save", str(plan), "--time-limit", "20"]) == 0
    assert load_yaml_file(plan)["scenario"]["cluster"]["network"]["format"] == "amp-tui/network/1"
    assert load_scenario(str(plan)).cluster.nodes[0].measured == load_scenario(str(path)).cluster.nodes[0].measured


@pytest.mark.parametrize("change, message", [
    (lambda d: d.update(format="amp-tui/profile/1"), "not an amp-tui network profile"),
    (lambda d: d["measurements"].pop(), "it was cut short or edited"),
    (lambda d: d.pop("groups"), "groups: required (is the file cut short?)"),
    (lambda d: d["measurements"][0].update(seconds=-1), "measurements[0].seconds: -1: must be greater than 0"),
    (lambda d: d["measurements"][0].update(test="bisection"), "expected one of allreduce, p2p, p2p_all"),
    (lambda d: d["measurements"][0].update(groups=[3]), "must be at most 0"),
    (lambda d: d.update(speed="fast"), "unknown field"),
])
def test_a_bad_profile_is_refused_in_one_line(tmp_path, capsys, change, message):
    doc = profile_doc()
    change(doc)
    (tmp_path / "net.yaml").write_text(dump_yaml(doc))
    assert main(["plan", str(scenario_file(tmp_path, "net.yaml"))]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and message in err and "net.yaml" in err


def test_without_torchrun_it_says_how_to_launch(capsys, monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.delenv("RANK", raising=False)
    assert main(["profile", "--network", "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "torchrun" in err and "--nproc-per-node" in err


def test_torchrun_on_the_cpu_writes_a_network_profile_plan_reads(tmp_path, capsys):
    """The code path a cluster runs, with gloo: 4 processes, every 2 pretending to be a node."""
    pytest.importorskip("torch")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[2]),
                                                        os.environ.get("PYTHONPATH", "")]), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4",
                           "-m", "amp_tui", "profile", "--network", "--device", "cpu", "--ranks-per-node", "2",
                           "--warmups", "0", "--repeats", "1", "-o", "net.yaml"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "wrote net.yaml" in done.stdout
    profile = parse_network(load_yaml_file(tmp_path / "net.yaml"), "net.yaml")
    assert (profile.backend, profile.device, profile.world_size, profile.simulated_nodes) == ("gloo", "cpu", 4, True)
    assert {(row.test, row.scope) for row in profile.rows} == {("allreduce", "intra"), ("p2p", "intra"),
                                                               ("p2p", "inter"), ("p2p_all", "inter"),
                                                               ("allreduce", "inter")}
    assert len(profile.groups) == 1 and len(profile.groups[0].nodes) == 2 and profile.groups[0].gpus_per_node == 2
    links = profile.links(0)
    assert all(figure is not None and figure > 0 for figure in (links.intra_bandwidth, links.intra_latency_s,
                                                                links.inter_bandwidth, links.inter_flow_bandwidth,
                                                                links.inter_latency_s))
    scenario = tmp_path / "s.yaml"
    scenario.write_text(dump_yaml({"name": "cpu", "cluster": {"nodes": [{"gpu": "A100-80GB", "count": 2,
                                   "gpus_per_node": 2, "intra_node_bandwidth": "300 GB/s",
                                   "inter_node_bandwidth": "100 Gbps"}], "network": "net.yaml"},
                                   "model": {"preset": "gpt2-medium"}, "training": {"global_batch_size": 8}}))
    assert main(["plan", str(scenario), "--top", "1", "--time-limit", "20"]) == 0
    out = capsys.readouterr().out
    assert "links from network profile net.yaml: measured on a CPU with gloo" in out
    assert "group 0 (2 x 2xA100-80GB): measured all-reduce inside a node" in out
