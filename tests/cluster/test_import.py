"""`amp-tui import`: SLURM's and nvidia-smi's output (fixtures in tests/data/cluster, in each tool's
format) into a scenario that plan ranks; every bad or foreign input refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from amp_tui.cli import main
from amp_tui.core.base.yamlio import load_yaml_file
from amp_tui.core.spec.scenario import load_scenario
from amp_tui.importers.cluster import Options, import_cluster
from amp_tui.importers.links import intra_link
from amp_tui.importers.nvidia import parse_topology
from amp_tui.importers.text import read_input

DATA = Path(__file__).resolve().parents[1] / "data" / "cluster"


def fixture(name: str) -> str:
    return str(DATA / name)


def imported(*names: str, **options):
    return import_cluster([(None, read_input(DATA / n), n) for n in names], Options(**options))


def one_line_error(capsys, argv) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("amp-tui: error: ") and "\n" not in err, err
    return err


def test_scontrol_with_two_gpu_kinds_becomes_two_groups_that_plan_ranks(tmp_path, capsys):
    out = tmp_path / "cluster.yaml"
    assert main(["import", fixture("scontrol-a100-a10g.txt"), "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "imported 2 node groups, 6 nodes, 32 GPUs" in printed
    scenario = load_scenario(str(out))
    groups = scenario.cluster.nodes
    assert [(g.count, g.gpu.name, g.gpus_per_node) for g in groups] == [(2, "A100-40GB", 8), (4, "A10G", 4)]
    assert [g.intra_link_class for g in groups] == ["nvlink", "pcie"]
    # what the inputs cannot say is said, in the file and on the terminal
    text = out.read_text()
    assert "A100-40GB assumed" in text and "100 Gbps assumed" in text and "no nvidia-smi topo -m given" in text
    assert "not known: the network between nodes" in printed
    assert main(["plan", str(out), "--top", "3", "--json", "--time-limit", "20"]) == 0
    ranked = json.loads(capsys.readouterr().out)["strategies"]
    assert ranked and all(s["iteration_time_s"] > 0 for s in ranked)


def test_sinfo_per_node_rows_give_the_groups_scontrol_gives():
    by_scontrol = imported("scontrol-a100-a10g.txt").cluster_dict("c")
    by_sinfo = imported("sinfo-a100-a10g.txt").cluster_dict("c")
    assert by_sinfo == by_scontrol


def test_sinfo_grouped_rows_expand_hostlists_and_leave_out_cpu_nodes():
    result = imported("sinfo-grouped.txt")
    assert [(g.count, g.gpu, g.nodes[0]) for g in result.groups] == [(2, "A100-40GB", "gpu-a100-01"),
                                                                      (4, "A10G", "gpu-a10g-01")]
    assert any("left out 16 nodes without GPUs" in note for note in result.notes)


def test_one_liner_records_drained_nodes_and_a_gres_without_a_type():
    result = imported("scontrol-oneline.txt")
    (group,) = result.groups
    assert (group.gpu, group.count, group.nodes) == ("V100", 2, ("v100-01", "v100-03"))   # type from the feature
    assert any("v100-02: IDLE+DRAIN" in note for note in result.notes)
    assert imported("scontrol-oneline.txt", all_nodes=True).groups[0].count == 3


@pytest.mark.parametrize("name, gpu, gpus, link, gbytes_per_s", [
    ("topo-dgx-a100.txt", "A100-80GB", 8, "nvlink", 300.0),          # NVSwitch: NV12 to every GPU, 12 links
    ("topo-dgx1-v100.txt", "V100", 8, "nvlink", 150.0),              # hybrid cube mesh: 6 links per GPU
    ("topo-a10g-pcie.txt", "A10G", 4, "host", 31.5),                 # through the host bridge: no P2P in NCCL
    ("topo-l40s-pcie-switch.txt", "L40S", 4, "pcie", 31.5),          # PCIe switches (PIX/PXB): P2P
    ("topo-a6000-nvlink-pairs.txt", "RTX-A6000", 4, "host", 31.5),   # NVLink pairs; a ring crosses SYS
])
def test_topologies_give_the_intra_node_link_class(name, gpu, gpus, link, gbytes_per_s):
    topology = parse_topology(read_input(DATA / name), name)
    assert topology.gpus == gpus
    found = intra_link(topology, gpu, gpus)
    assert (found.link_class, found.bandwidth / 1e9) == (link, pytest.approx(gbytes_per_s))


def test_nvlink_pairs_are_noted_and_nics_are_counted():
    pairs = intra_link(parse_topology(read_input(DATA / "topo-a6000-nvlink-pairs.txt"), "t"), "RTX-A6000", 4)
    assert "NVLink joins only GPU0-GPU1, GPU2-GPU3" in pairs.notes[0]
    result = imported("scontrol-a100-a10g.txt", "topo-dgx-a100.txt", "gpu-query-a100.csv")
    assert any("8 NICs (mlx5_0" in note for note in result.notes)


def test_nvidia_smi_output_names_the_gpu_and_the_node_link(tmp_path, capsys):
    out = tmp_path / "c.yaml"
    argv = ["import", fixture("scontrol-a100-a10g.txt"), "gpu-a100-01=" + fixture("topo-dgx-a100.txt"),
            fixture("gpu-query-a100.csv"), "a10g=" + fixture("topo-a10g-pcie.txt"), fixture("gpu-query-a10g.csv"),
            "--network", "200 Gbps", "-o", str(out)]
    assert main(argv) == 0
    groups = load_scenario(str(out)).cluster.nodes
    assert [g.gpu.name for g in groups] == ["A100-80GB", "A10G"]          # the memory told 80 GB from 40
    assert [(g.intra_link_class, g.intra_node_bandwidth) for g in groups] == [("nvlink", 300e9), ("host", 31.5e9)]
    assert all(g.inter_node_bandwidth == 25e9 for g in groups)
    assert "assumed" not in capsys.readouterr().out.split("not known: prices")[0]


def test_nvidia_smi_alone_describes_nodes_like_it(tmp_path):
    out = tmp_path / "c.yaml"
    assert main(["import", fixture("topo-dgx-a100.txt"), fixture("gpu-query-a100.csv"), "--nodes", "4",
                 "-o", str(out)]) == 0
    (group,) = load_scenario(str(out)).cluster.nodes
    assert (group.count, group.gpu.name, group.gpus_per_node, group.intra_link_class) == (4, "A100-80GB", 8, "nvlink")


def test_features_naming_a_fabric_set_the_network():
    text = read_input(DATA / "sinfo-grouped.txt").replace("a100,nvlink,ib", "a100,hdr")
    group = import_cluster([(None, text, "sinfo")], Options()).groups[0]
    assert group.network == 200e9 / 8 and "HDR" in group.network_source


def test_the_written_file_is_a_scenario_and_is_not_overwritten(tmp_path, capsys):
    out = tmp_path / "c.yaml"
    assert main(["import", fixture("sinfo-a100-a10g.txt"), "-o", str(out), "--model", "llama3-8b"]) == 0
    assert load_yaml_file(out)["model"] == {"preset": "llama3-8b"}
    capsys.readouterr()
    assert "already exists" in one_line_error(capsys, ["import", fixture("sinfo-a100-a10g.txt"), "-o", str(out)])
    assert main(["import", fixture("sinfo-a100-a10g.txt")]) == 0       # no -o: the scenario on stdout
    assert "cluster:" in capsys.readouterr().out


@pytest.mark.parametrize("text, message", [
    ("name: my-cluster\ncluster: {}\n", "not the output of scontrol show node"),
    ("", "holds nothing"),
    ("NODELIST PARTITION GRES AVAIL_FEATURES\ngpu-01 gpu* gpu:a100:8\n", "3 values under 4 columns"),
    ("NodeName=n1 Arch=x86_64\n   Gres=gpu:a100:\n   State=IDLE\n", "not a gres such as gpu:a100:8"),
    ("NodeName=n1 Arch=x86_64\n   Gres=gpu:a100:4,gpu:v100:4\n   State=IDLE\n", "GPUs of 2 types in one node"),
    ("NodeName=n1 Arch=x86_64\n   Gres=gpu:zz9000:4\n   State=IDLE\n", "not a catalog GPU"),
    ("NodeName=n1 Arch=x86_64\n   Gres=gpu:4\n   State=IDLE\n", "the gres names no GPU type"),
    ("NodeName=n1 Gres=gpu:a10g:4 State=IDLE\nNodeName=n1 Gres=gpu:a10g:4 State=IDLE\n", "listed twice"),
    ("NODELIST PARTITION GRES\ngpu-[1-99999999999] gpu gpu:a10g:4\n", "not a hostlist range"),
    ("\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV12\t0-7\n", "no row for this GPU"),
    ("\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV12\t0-7\nGPU1\tPHB\t X \t0-7\n", "not symmetric"),
    ("\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tFAST\t0-7\nGPU1\tFAST\t X \t0-7\n", "not a topo -m link"),
    ("name, memory.total [MiB]\nNVIDIA A10G, 23028 MiB\nNVIDIA A100-SXM4-80GB, 81920 MiB\n", "several types"),
])
def test_bad_or_foreign_text_is_one_line(tmp_path, capsys, text, message):
    path = tmp_path / "input.txt"
    path.write_text(text)
    assert message in one_line_error(capsys, ["import", str(path)])


def test_a_file_keyed_to_nothing_or_a_topology_of_another_size_is_refused(capsys):
    nodes = fixture("scontrol-a100-a10g.txt")
    assert "names no node, gres type" in one_line_error(capsys, ["import", nodes, "h100=" + fixture("topo-dgx-a100.txt")])
    assert "has 4 GPUs per node" in one_line_error(capsys, ["import", nodes, "a10g=" + fixture("topo-dgx-a100.txt")])
    assert "fits no node group" in one_line_error(capsys, ["import", nodes, fixture("topo-dgx1-v100.txt"),
                                                            "--partition", "a10g"])


def test_input_size_is_bounded(tmp_path, capsys):
    from amp_tui.importers.text import MAX_INPUT_BYTES

    big = tmp_path / "big.txt"
    with big.open("wb") as handle:
        handle.truncate(MAX_INPUT_BYTES + 1)
    assert "larger than the limit" in one_line_error(capsys, ["import", str(big)])
    assert "no such file" in one_line_error(capsys, ["import", str(tmp_path / "missing.txt")])
    assert "expected TYPE=NAME" in one_line_error(capsys, ["import", fixture("sinfo-grouped.txt"), "--gpu", "a100"])
